import { useInbox, inputKey, type Client, type PendingInput } from "use-agentenkit";

import { InputCard, TooLate, useCardActions } from "./InputCard";
import { hrefOf, type Route } from "./route";
import { shown } from "./shown";

/** Every open request of the signed-in owner, polled every 2 s. */
export function InboxPage(props: { client: Client; navigate: (route: Route) => void }) {
  const inbox = useInbox(props.client);
  const actions = useCardActions(inbox);
  const threadLink = (input: PendingInput) => {
    const route: Route = { page: "threads", threadId: input.threadId };
    return (
      <a
        className="thread-link"
        href={hrefOf(route)}
        onClick={(event) => {
          event.preventDefault();
          props.navigate(route);
        }}
      >
        Open thread
      </a>
    );
  };

  return (
    <section aria-labelledby="inbox-title">
      <h1 id="inbox-title">Inbox</h1>
      {inbox.error && <p role="alert">{inbox.error.message}</p>}
      <TooLate names={inbox.tooLate.map(describe)} />
      {!inbox.loaded ? (
        <p className="hint">Loading…</p>
      ) : inbox.pendingInputs.length === 0 ? (
        <p className="hint">Nothing is waiting for you.</p>
      ) : (
        <div className="cards">
          {inbox.pendingInputs.map((input) => (
            <InputCard key={inputKey(input)} input={input} actions={actions} threadLink={threadLink(input)} />
          ))}
        </div>
      )}
    </section>
  );
}

function describe(input: PendingInput): string {
  return input.kind === "ask"
    ? `The questions of ${shown(input.runName)}`
    : `${shown(input.toolName)} for ${shown(input.runName)}`;
}
