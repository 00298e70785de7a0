import { useMemo, useState } from "react";
import { useInbox, inputKey, type Client, type PendingInput } from "use-agentenkit";

import { InputCard, isApproval, TooLate, useCardActions } from "./InputCard";
import { hrefOf, type Route } from "./route";
import { shown } from "./shown";

/** Every open request of the signed-in owner, polled every 2 s. */
export function InboxPage(props: { client: Client; navigate: (route: Route) => void }) {
  const inbox = useInbox(props.client);
  const actions = useCardActions(inbox);
  const [picked, setPicked] = useState<ReadonlySet<string>>(new Set());
  // Only what is still listed can be decided: a card answered elsewhere
  // leaves the selection with it.
  const selected = useMemo(
    () => inbox.pendingInputs.filter((input) => isApproval(input) && picked.has(inputKey(input))),
    [inbox.pendingInputs, picked],
  );
  const toggle = (key: string) =>
    setPicked((keys) => {
      const next = new Set(keys);
      if (!next.delete(key)) next.add(key);
      return next;
    });
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
      {selected.length > 0 && (
        <DecideSelected
          count={selected.length}
          decide={(approved, said) => {
            setPicked(new Set());
            void inbox.respondToMany(selected, approved, approved ? { message: said } : { reason: said });
          }}
          clear={() => setPicked(new Set())}
        />
      )}
      {!inbox.loaded ? (
        <p className="hint">Loading…</p>
      ) : inbox.pendingInputs.length === 0 ? (
        <p className="hint">Nothing is waiting for you.</p>
      ) : (
        <div className="cards">
          {inbox.pendingInputs.map((input) => (
            <InputCard
              key={inputKey(input)}
              input={input}
              actions={actions}
              threadLink={threadLink(input)}
              selection={{ selected: picked.has(inputKey(input)), toggle: () => toggle(inputKey(input)) }}
            />
          ))}
        </div>
      )}
    </section>
  );
}

/** The selected approvals, decided in one request: each bound to the
 * arguments its card shows, with one note (or reason) for all. */
function DecideSelected(props: {
  count: number;
  decide: (approved: boolean, said: string | undefined) => void;
  clear: () => void;
}) {
  const [note, setNote] = useState("");
  const said = note.trim() === "" ? undefined : note.trim();
  return (
    <div role="toolbar" aria-label="Selected requests" className="selected-bar">
      <span className="selected-count">{props.count} selected</span>
      <input
        type="text"
        className="note"
        aria-label="Note or reason for all (optional)"
        placeholder="Note or reason for all (optional)"
        value={note}
        onChange={(event) => setNote(event.target.value)}
      />
      <button type="button" className="approve" onClick={() => props.decide(true, said)}>
        Approve selected
      </button>
      <button type="button" className="deny" onClick={() => props.decide(false, said)}>
        Deny selected
      </button>
      <button type="button" className="edit-toggle" onClick={props.clear}>
        Clear
      </button>
    </div>
  );
}

function describe(input: PendingInput): string {
  return input.kind === "ask"
    ? `The questions of ${shown(input.runName)}`
    : `${shown(input.toolName)} for ${shown(input.runName)}`;
}
