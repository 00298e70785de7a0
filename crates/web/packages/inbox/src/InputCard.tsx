// One open request as a card: an approval (Approve / Edit / Deny, with a
// note or reason), a wait for something else (a status line), or a question
// set.

import { useMemo, useState } from "react";
import { parseJson, stringifyJson, type Answers, type Decision, type PendingInput } from "use-agentenkit";

import { QuestionForm } from "./QuestionForm";
import { shown } from "./shown";
import { TimeLeft } from "./TimeLeft";

export interface CardActions {
  /** `decision`: edited arguments and a note the model reads. */
  approve(input: PendingInput, decision?: Decision): void;
  /** `reason`: why, which the model reads. */
  deny(input: PendingInput, reason?: string): void;
  answer(input: PendingInput, answers: Answers): void;
  skip(input: PendingInput): void;
}

/** What both hooks offer (each answers by the input, run and call). */
interface Answering {
  respondToInput(input: PendingInput, approved: boolean, payload?: unknown, decision?: Decision): Promise<void>;
  answer(input: PendingInput, answers: Answers): Promise<void>;
  skip(input: PendingInput): Promise<void>;
}

/** A card's buttons, wired to `useInbox` or `useAgentThread`. */
export function useCardActions(hook: Answering): CardActions {
  const { respondToInput, answer, skip } = hook;
  return useMemo(
    () => ({
      approve: (input, decision) => void respondToInput(input, true, undefined, decision),
      deny: (input, reason) => void respondToInput(input, false, undefined, { reason }),
      answer: (input, answers) => void answer(input, answers),
      skip: (input) => void skip(input),
    }),
    [respondToInput, answer, skip],
  );
}

/** A card picked for deciding many at once (approvals only). */
export interface Selection {
  selected: boolean;
  toggle(): void;
}

/** Whether `input` waits for a person's approve or deny: by its kind alone
 * (a tool that parks itself may give any reason, "approval" too, and is
 * answered as a job). */
export function isApproval(input: PendingInput): boolean {
  return input.kind === "approval";
}

export function InputCard(props: {
  input: PendingInput;
  actions: CardActions;
  threadLink?: React.ReactNode;
  selection?: Selection;
}) {
  const { input, actions, selection } = props;
  const titleId = `card-${input.runId}-${input.toolCallId}`;
  const approval = isApproval(input);
  return (
    <article className="card" aria-labelledby={titleId}>
      <header className="card-head">
        {approval && selection && (
          <input
            type="checkbox"
            className="select"
            aria-label="Select"
            checked={selection.selected}
            onChange={selection.toggle}
          />
        )}
        <h2 id={titleId} className="tool">
          {shown(input.toolName)}
        </h2>
        <span className="run">
          {shown(input.runName)} <span className="depth">depth {input.depth}</span>
          {input.agentVersion && (
            <span className="version" title={`agent version ${input.agentVersion}`}>
              version {input.agentVersion.slice(0, 12)}
            </span>
          )}
        </span>
        {input.expiresAt && <TimeLeft expiresAt={input.expiresAt} />}
      </header>
      {input.approvalsRequired !== undefined && (
        <p className="approvals">
          {input.approvalsGiven ?? 0} of {input.approvalsRequired} approvals
        </p>
      )}
      {input.kind === "ask" && input.request ? (
        <QuestionForm
          idPrefix={titleId}
          request={input.request}
          onSubmit={(answers) => actions.answer(input, answers)}
          onSkip={() => actions.skip(input)}
        />
      ) : (
        <>
          <pre className="arguments" aria-label="Arguments">
            {shown(stringifyJson(input.arguments, 2), true)}
          </pre>
          {approval ? (
            <Decide input={input} actions={actions} idPrefix={titleId} />
          ) : (
            <p className="waiting">Waiting for {shown(input.reason)}</p>
          )}
        </>
      )}
      {props.threadLink}
    </article>
  );
}

/** An approval's answer: Approve (with edited arguments, when editing),
 * Deny, and a note or reason the model reads with either. */
function Decide(props: { input: PendingInput; actions: CardActions; idPrefix: string }) {
  const { input, actions, idPrefix } = props;
  const [note, setNote] = useState("");
  const [draft, setDraft] = useState<string | null>(null);
  const [draftError, setDraftError] = useState<string | null>(null);
  const said = note.trim() === "" ? undefined : note.trim();
  const approve = () => {
    const decision: Decision = { message: said };
    if (draft !== null) {
      try {
        const edited: unknown = parseJson(draft);
        if (stringifyJson(edited) !== stringifyJson(input.arguments)) decision.arguments = edited;
      } catch (e) {
        setDraftError(`The edited arguments are not JSON: ${(e as Error).message}`);
        return;
      }
    }
    actions.approve(input, decision);
  };
  return (
    <>
      {draft !== null && (
        <>
          <label className="field" htmlFor={`${idPrefix}-edit`}>
            Edited arguments
          </label>
          <textarea
            id={`${idPrefix}-edit`}
            className="edit"
            rows={Math.min(12, draft.split("\n").length + 1)}
            spellCheck={false}
            value={draft}
            onChange={(event) => {
              setDraft(event.target.value);
              setDraftError(null);
            }}
          />
          {draftError && (
            <p role="alert" className="draft-error">
              {draftError}
            </p>
          )}
        </>
      )}
      <label className="field" htmlFor={`${idPrefix}-note`}>
        Note or reason (optional)
      </label>
      <input
        id={`${idPrefix}-note`}
        className="note"
        type="text"
        value={note}
        onChange={(event) => setNote(event.target.value)}
      />
      <div className="actions">
        <button type="button" className="approve" onClick={approve}>
          {draft === null ? "Approve" : "Approve with edits"}
        </button>
        {/* A call several people approve is approved as proposed. */}
        {input.approvalsRequired === undefined && (
          <button
            type="button"
            className="edit-toggle"
            onClick={() => {
              setDraft(draft === null ? stringifyJson(input.arguments, 2) : null);
              setDraftError(null);
            }}
          >
            {draft === null ? "Edit" : "Discard edits"}
          </button>
        )}
        <button type="button" className="deny" onClick={() => actions.deny(input, said)}>
          Deny
        </button>
      </div>
    </>
  );
}

/** Requests answered here that were no longer open. */
export function TooLate(props: { names: string[] }) {
  if (props.names.length === 0) return null;
  return (
    <div role="status" className="too-late-list">
      {props.names.map((name, index) => (
        <p key={index} className="too-late">
          <strong>Too late</strong> {name} was already answered elsewhere, expired or stopped.
        </p>
      ))}
    </div>
  );
}
