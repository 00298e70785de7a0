// One open request as a card: an approval (Approve / Deny), a wait for
// something else (a status line), or a question set.

import { useMemo } from "react";
import type { Answers, PendingInput } from "use-agentenkit";

import { QuestionForm } from "./QuestionForm";
import { shown } from "./shown";
import { TimeLeft } from "./TimeLeft";

export interface CardActions {
  approve(input: PendingInput): void;
  deny(input: PendingInput): void;
  answer(input: PendingInput, answers: Answers): void;
  skip(input: PendingInput): void;
}

/** What both hooks offer (each answers by the input, run and call). */
interface Answering {
  respondToInput(input: PendingInput, approved: boolean): Promise<void>;
  answer(input: PendingInput, answers: Answers): Promise<void>;
  skip(input: PendingInput): Promise<void>;
}

/** A card's buttons, wired to `useInbox` or `useAgentThread`. */
export function useCardActions(hook: Answering): CardActions {
  const { respondToInput, answer, skip } = hook;
  return useMemo(
    () => ({
      approve: (input) => void respondToInput(input, true),
      deny: (input) => void respondToInput(input, false),
      answer: (input, answers) => void answer(input, answers),
      skip: (input) => void skip(input),
    }),
    [respondToInput, answer, skip],
  );
}

export function InputCard(props: { input: PendingInput; actions: CardActions; threadLink?: React.ReactNode }) {
  const { input, actions } = props;
  const titleId = `card-${input.runId}-${input.toolCallId}`;
  const approval = input.kind === "approval" || input.reason === "approval";
  return (
    <article className="card" aria-labelledby={titleId}>
      <header className="card-head">
        <h2 id={titleId} className="tool">
          {shown(input.toolName)}
        </h2>
        <span className="run">
          {shown(input.runName)} <span className="depth">depth {input.depth}</span>
        </span>
        {input.expiresAt && <TimeLeft expiresAt={input.expiresAt} />}
      </header>
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
            {shown(JSON.stringify(input.arguments, null, 2), true)}
          </pre>
          {approval ? (
            <div className="actions">
              <button type="button" className="approve" onClick={() => actions.approve(input)}>
                Approve
              </button>
              <button type="button" className="deny" onClick={() => actions.deny(input)}>
                Deny
              </button>
            </div>
          ) : (
            <p className="waiting">Waiting for {shown(input.reason)}</p>
          )}
        </>
      )}
      {props.threadLink}
    </article>
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
