import { useMemo, useState } from "react";
import { createClient } from "use-agentenkit";

import { InboxPage } from "./InboxPage";
import { hrefOf, useRoute, type Route } from "./route";
import { SignIn } from "./SignIn";
import { ThreadsPage } from "./ThreadsPage";

/** The API serves the page, so it is the page's own origin. */
const API = "";

/** The key lives for this tab only: a reload keeps it, a new tab asks again. */
const KEY_STORAGE = "agentenkit.apiKey";

export function App() {
  const [apiKey, setApiKey] = useState(() => sessionStorage.getItem(KEY_STORAGE));
  const client = useMemo(() => (apiKey ? createClient({ baseUrl: API, apiKey }) : null), [apiKey]);
  const [route, navigate] = useRoute();

  if (!client) {
    return (
      <SignIn
        baseUrl={API}
        onSignedIn={(key) => {
          sessionStorage.setItem(KEY_STORAGE, key);
          setApiKey(key);
        }}
      />
    );
  }
  const signOut = () => {
    sessionStorage.removeItem(KEY_STORAGE);
    setApiKey(null);
  };
  return (
    <div className="shell">
      <header className="top">
        <span className="brand">agentenkit</span>
        <nav aria-label="Pages">
          <NavLink route={{ page: "inbox" }} current={route} navigate={navigate}>
            Inbox
          </NavLink>
          <NavLink route={{ page: "threads", threadId: null }} current={route} navigate={navigate}>
            Threads
          </NavLink>
        </nav>
        <button type="button" className="quiet" onClick={signOut}>
          Sign out
        </button>
      </header>
      <main>
        {route.page === "inbox" ? (
          <InboxPage client={client} navigate={navigate} />
        ) : (
          <ThreadsPage client={client} threadId={route.threadId} navigate={navigate} />
        )}
      </main>
    </div>
  );
}

function NavLink(props: {
  route: Route;
  current: Route;
  navigate: (route: Route) => void;
  children: string;
}) {
  const active = props.route.page === props.current.page;
  return (
    <a
      href={hrefOf(props.route)}
      aria-current={active ? "page" : undefined}
      onClick={(event) => {
        if (event.metaKey || event.ctrlKey || event.shiftKey || event.button !== 0) return;
        event.preventDefault();
        props.navigate(props.route);
      }}
    >
      {props.children}
    </a>
  );
}
