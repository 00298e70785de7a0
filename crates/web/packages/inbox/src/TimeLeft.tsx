import { useEffect, useState } from "react";

/** "14 min left" from ten minutes up (hours past the first hour), "mm:ss
 * left" below. */
export function formatTimeLeft(ms: number): string {
  if (ms <= 0) return "expiring";
  const seconds = Math.floor(ms / 1000);
  if (seconds >= 3600) {
    const hours = Math.floor(seconds / 3600);
    const minutes = Math.floor((seconds % 3600) / 60);
    return minutes ? `${hours} h ${minutes} min left` : `${hours} h left`;
  }
  if (seconds >= 600) return `${Math.floor(seconds / 60)} min left`;
  const pad = (n: number) => String(n).padStart(2, "0");
  return `${pad(Math.floor(seconds / 60))}:${pad(seconds % 60)} left`;
}

export function TimeLeft(props: { expiresAt: string }) {
  const deadline = Date.parse(props.expiresAt);
  const [now, setNow] = useState(() => Date.now());
  useEffect(() => {
    const timer = setInterval(() => setNow(Date.now()), 1000);
    return () => clearInterval(timer);
  }, []);
  return (
    <time className="time-left" dateTime={props.expiresAt} title={new Date(deadline).toLocaleString()}>
      {formatTimeLeft(deadline - now)}
    </time>
  );
}
