// A question set (SPEC §6): "Question i of N", the defaults pre-checked,
// Submit (Enter) sends only the questions the person changed, so the
// server records the untouched ones as defaulted; Skip takes every default.

import { useState, type FormEvent, type KeyboardEvent } from "react";
import type { Answers, QuestionSet } from "use-agentenkit";

/** Choices not yet answered, by card. */
const drafts = new Map<string, Answers>();

export function QuestionForm(props: {
  idPrefix: string;
  request: QuestionSet;
  onSubmit: (answers: Answers) => void;
  onSkip: () => void;
}) {
  const { questions } = props.request;
  const [chosen, setChosenState] = useState<Answers>(
    () => drafts.get(props.idPrefix) ?? Object.fromEntries(questions.map((q) => [q.id, q.defaults ?? []])),
  );
  // A card whose answer failed comes back (remounted): with the choices
  // the person made, not the defaults.
  const setChosen = (update: (current: Answers) => Answers) =>
    setChosenState((current) => {
      const next = update(current);
      drafts.set(props.idPrefix, next);
      return next;
    });

  const submit = (event: FormEvent) => {
    event.preventDefault();
    props.onSubmit(changedAnswers(questions, chosen));
  };
  // Enter on a radio or checkbox submits, as it does in a text field.
  const onKeyDown = (event: KeyboardEvent<HTMLFormElement>) => {
    const target = event.target as HTMLElement;
    if (event.key === "Enter" && target instanceof HTMLInputElement) {
      event.preventDefault();
      event.currentTarget.requestSubmit();
    }
  };
  const toggle = (questionId: string, value: string, multiple: boolean, on: boolean) =>
    setChosen((current) => {
      const before = current[questionId] ?? [];
      const after = multiple ? (on ? [...before, value] : before.filter((v) => v !== value)) : [value];
      return { ...current, [questionId]: after };
    });

  return (
    <form className="questions" onSubmit={submit} onKeyDown={onKeyDown}>
      {props.request.preamble && <p className="preamble">{props.request.preamble}</p>}
      {questions.map((question, index) => {
        const name = `${props.idPrefix}-${question.id}`;
        const multiple = question.multiple === true;
        return (
          <fieldset key={question.id}>
            <legend>
              <span className="counter">
                Question {index + 1} of {questions.length}
              </span>{" "}
              <span className="prompt">{question.prompt}</span>
            </legend>
            {question.link && isWebLink(question.link) && (
              <p className="link">
                Open{" "}
                <a href={question.link} target="_blank" rel="noopener noreferrer">
                  {question.link}
                </a>
                , then say when you are done.
              </p>
            )}
            {isTyped(question) ? (
              <TypedAnswer
                name={name}
                question={question}
                value={(chosen[question.id] ?? [])[0] ?? ""}
                onChange={(value) =>
                  setChosen((current) => ({ ...current, [question.id]: value === "" ? [] : [value] }))
                }
              />
            ) : (
              question.options.map((option) => (
              <label key={option.value} className="option">
                <input
                  type={multiple ? "checkbox" : "radio"}
                  name={name}
                  value={option.value}
                  checked={(chosen[question.id] ?? []).includes(option.value)}
                  onChange={(event) => toggle(question.id, option.value, multiple, event.target.checked)}
                />
                {option.label}
              </label>
              ))
            )}
          </fieldset>
        );
      })}
      <div className="actions">
        <button type="submit" className="approve">
          Submit
        </button>
        <button type="button" onClick={props.onSkip}>
          Skip
        </button>
      </div>
    </form>
  );
}

type Question = QuestionSet["questions"][number];

/** An http(s) address (the server checks links; a page never offers
 * another scheme). */
function isWebLink(link: string): boolean {
  return /^https?:\/\//i.test(link);
}

/** A question answered by typing: a text, a number or an integer. */
function isTyped(question: Question): boolean {
  return question.kind === "text" || question.kind === "number" || question.kind === "integer";
}

/** The field of a typed question, with its bounds (the server checks them
 * again). */
function TypedAnswer(props: { name: string; question: Question; value: string; onChange: (value: string) => void }) {
  const { question } = props;
  const text = question.kind === "text";
  return (
    <input
      className="typed"
      type={text ? "text" : "number"}
      name={props.name}
      aria-label={question.prompt}
      required={question.required === true}
      value={props.value}
      {...(text
        ? { minLength: question.min, maxLength: question.max }
        : { min: question.min, max: question.max, step: question.kind === "integer" ? 1 : "any" })}
      onChange={(event) => props.onChange(event.target.value)}
    />
  );
}

/** The questions whose choice differs from their defaults (as sets). */
export function changedAnswers(questions: QuestionSet["questions"], chosen: Answers): Answers {
  const answers: Answers = {};
  for (const question of questions) {
    const now = chosen[question.id] ?? [];
    const defaults = question.defaults ?? [];
    const same = now.length === defaults.length && now.every((value) => defaults.includes(value));
    if (!same) answers[question.id] = now;
  }
  return answers;
}
