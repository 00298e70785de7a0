// The page's own routes under /ui/: the inbox, and threads (a new one, or
// one followed by id). The API serves index.html for each of them.

import { useCallback, useEffect, useState } from "react";

export type Route = { page: "inbox" } | { page: "threads"; threadId: string | null };

/** Where the page is mounted (`/ui/` unless a proxy adds a prefix). */
const BASE = import.meta.env.BASE_URL;


export function parseRoute(pathname: string): Route {
  const at = pathname.indexOf(BASE);
  const rest = at >= 0 ? pathname.slice(at + BASE.length) : "";
  const [first, second] = rest.split("/").filter(Boolean);
  if (first === "threads") return { page: "threads", threadId: second ? decodeURIComponent(second) : null };
  return { page: "inbox" };
}

export function hrefOf(route: Route): string {
  if (route.page === "inbox") return BASE;
  return route.threadId ? `${BASE}threads/${encodeURIComponent(route.threadId)}` : `${BASE}threads`;
}

export function useRoute(): [Route, (route: Route) => void] {
  const [route, setRoute] = useState(() => parseRoute(window.location.pathname));
  useEffect(() => {
    const onPop = () => setRoute(parseRoute(window.location.pathname));
    window.addEventListener("popstate", onPop);
    return () => window.removeEventListener("popstate", onPop);
  }, []);
  const navigate = useCallback((next: Route) => {
    window.history.pushState(null, "", hrefOf(next));
    setRoute(next);
  }, []);
  return [route, navigate];
}
