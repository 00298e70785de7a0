// Start a thread with an agent and follow it: its messages, tool calls and
// results, and the cards of its open requests, answered in place. A message
// sent while a turn works is queued, steers it, or interrupts it; a past
// message can be edited.

import { useEffect, useState, type FormEvent, type KeyboardEvent } from "react";
import {
  useAgentThread,
  inputKey,
  stringifyJson,
  type AgentInfo,
  type Client,
  type OnActive,
  type StoredMessage,
} from "use-agentenkit";

import { InputCard, TooLate, useCardActions } from "./InputCard";
import type { Route } from "./route";
import { shown } from "./shown";

export function ThreadsPage(props: { client: Client; threadId: string | null; navigate: (route: Route) => void }) {
  const { client, threadId, navigate } = props;
  const [agents, setAgents] = useState<AgentInfo[] | null>(null);
  const [agent, setAgent] = useState("");
  const [threadAgent, setThreadAgent] = useState<string | null>(null);
  const [message, setMessage] = useState("");
  const [problem, setProblem] = useState<string | null>(null);
  const [sending, setSending] = useState(false);
  const [onActive, setOnActive] = useState<OnActive>("enqueue");

  useEffect(() => {
    let live = true;
    client.agents().then(
      (list) => {
        if (!live) return;
        setAgents(list);
        setAgent((current) => current || list[0]?.name || "");
      },
      (e: unknown) => live && setProblem(`The agents could not be listed: ${String(e)}`),
    );
    return () => {
      live = false;
    };
  }, [client]);

  useEffect(() => {
    setThreadAgent(null);
    if (!threadId) return;
    let live = true;
    client.getThread(threadId).then(
      (thread) => live && setThreadAgent(thread.agent),
      (e: unknown) => live && setProblem(e instanceof Error ? e.message : String(e)),
    );
    return () => {
      live = false;
    };
  }, [client, threadId]);

  const send = async (event: FormEvent) => {
    event.preventDefault();
    const content = message.trim();
    if (!content || sending) return;
    setSending(true);
    setProblem(null);
    try {
      let target = threadId;
      if (!target) {
        target = (await client.createThread(agent)).id;
        navigate({ page: "threads", threadId: target });
      }
      await client.sendMessage(target, content, threadId ? { onActive } : {});
      setMessage("");
    } catch (e) {
      setProblem(e instanceof Error ? e.message : String(e));
    } finally {
      setSending(false);
    }
  };
  // Enter sends; Shift+Enter is a new line.
  const onKeyDown = (event: KeyboardEvent<HTMLTextAreaElement>) => {
    if (event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      event.currentTarget.form?.requestSubmit();
    }
  };

  return (
    <div>
      <h1>Threads</h1>
      <form className="compose" onSubmit={send}>
        <label htmlFor="agent">Agent</label>
        <select
          id="agent"
          value={threadId ? (threadAgent ?? "") : agent}
          disabled={threadId !== null}
          onChange={(event) => setAgent(event.target.value)}
        >
          {threadId && threadAgent && !agents?.some((a) => a.name === threadAgent) && (
            <option value={threadAgent}>{threadAgent}</option>
          )}
          {(agents ?? []).map((info) => (
            <option key={info.name} value={info.name}>
              {info.name}
              {info.description ? ` — ${info.description}` : ""}
            </option>
          ))}
        </select>
        <label htmlFor="message">Message</label>
        <textarea
          id="message"
          rows={3}
          value={message}
          onChange={(event) => setMessage(event.target.value)}
          onKeyDown={onKeyDown}
        />
        {threadId && (
          <>
            <label htmlFor="on-active">If a turn is working</label>
            <select id="on-active" value={onActive} onChange={(event) => setOnActive(event.target.value as OnActive)}>
              <option value="enqueue">Queue it for after the turn</option>
              <option value="steer">Add it to the turn at its next step</option>
              <option value="interrupt">Stop the turn and send it</option>
              <option value="rollback">Undo the turn and send it</option>
            </select>
          </>
        )}
        <div className="actions">
          <button type="submit" className="approve" disabled={sending || (!threadId && !agent)}>
            Send
          </button>
          {threadId && (
            <button type="button" onClick={() => navigate({ page: "threads", threadId: null })}>
              New thread
            </button>
          )}
        </div>
        {problem && <p role="alert">{problem}</p>}
      </form>
      {threadId && <ThreadView client={client} threadId={threadId} />}
    </div>
  );
}

function ThreadView(props: { client: Client; threadId: string }) {
  const thread = useAgentThread(props.client, props.threadId);
  // By the input, not its call id alone: two runs of a tree (sub-agents)
  // may use one call id.
  const actions = useCardActions(thread);
  const [editing, setEditing] = useState<number | null>(null);
  const edit = async (id: number, content: string) => {
    try {
      await thread.edit(id, content);
      setEditing(null);
    } catch {
      // `thread.error` says why; the form stays open.
    }
  };
  return (
    <section className="thread" aria-label="Thread">
      <p className="thread-status">
        <span className={`status status-${(thread.status ?? "loading").toLowerCase()}`}>
          {statusText(thread.status)}
        </span>
      </p>
      {thread.error && <p role="alert">{thread.error.message}</p>}
      <ol className="messages">
        {thread.messages.map((message) => (
          <MessageView
            key={message.id}
            message={message}
            editing={editing === message.id}
            onEdit={() => setEditing(message.id)}
            onCancel={() => setEditing(null)}
            onSave={(content) => edit(message.id, content)}
          />
        ))}
      </ol>
      {thread.queuedMessages.length > 0 && (
        <ol className="queued-messages" aria-label="Queued messages">
          {thread.queuedMessages.map((queued) => (
            <li key={queued.runId} className="message user queued">
              <span className="who">{queued.steers ? "Joins the turn at its next step" : "Queued"}</span>
              <p>{queued.content}</p>
            </li>
          ))}
        </ol>
      )}
      <TooLate names={thread.tooLate.map((callId) => `The request ${callId}`)} />
      {thread.pendingInputs.map((input) => (
        <InputCard key={inputKey(input)} input={input} actions={actions} />
      ))}
    </section>
  );
}

/** A past message as it should have been: sending it cuts the thread back
 * to before it and goes on from the edited text. */
function EditForm(props: { text: string; onCancel: () => void; onSave: (content: string) => void }) {
  const [text, setText] = useState(props.text);
  const save = (event: FormEvent) => {
    event.preventDefault();
    if (text.trim()) props.onSave(text.trim());
  };
  return (
    <form className="edit-message" onSubmit={save}>
      <label htmlFor="edited">Edited message</label>
      <textarea id="edited" rows={2} value={text} onChange={(event) => setText(event.target.value)} />
      <div className="actions">
        <button type="submit" className="approve">
          Send edit
        </button>
        <button type="button" onClick={props.onCancel}>
          Cancel
        </button>
      </div>
    </form>
  );
}

function statusText(status: string | null): string {
  switch (status) {
    case null:
      return "Loading…";
    case "IDLE":
      return "Idle";
    case "RUNNING":
      return "Working…";
    case "WAITING_FOR_INPUT":
      return "Waiting for you";
    default:
      return status;
  }
}

function MessageView(props: {
  message: StoredMessage;
  editing: boolean;
  onEdit: () => void;
  onCancel: () => void;
  onSave: (content: string) => void;
}) {
  const m = props.message as StoredMessage & Record<string, unknown>;
  if (m.role === "user") {
    const text = String(m.content ?? "");
    return (
      <li className="message user">
        <span className="who">{m.steered ? "You, during the turn" : "You"}</span>
        {props.editing ? (
          <EditForm text={text} onCancel={props.onCancel} onSave={props.onSave} />
        ) : (
          <>
            <p>{text}</p>
            <button type="button" className="edit" onClick={props.onEdit} aria-label={`Edit “${text}”`}>
              Edit
            </button>
          </>
        )}
      </li>
    );
  }
  if (m.role === "assistant") {
    const calls = (m.toolCalls as { id: string; name: string; arguments: unknown }[] | undefined) ?? [];
    return (
      <li className="message assistant">
        <span className="who">Agent</span>
        {typeof m.content === "string" && m.content && <p>{m.content}</p>}
        {calls.map((call) => (
          <div key={call.id} className="tool-call">
            <span className="label">calls {shown(call.name)}</span>
            <pre>{shown(stringifyJson(call.arguments, 2), true)}</pre>
          </div>
        ))}
      </li>
    );
  }
  if (m.role === "tool") {
    return (
      <li className="message tool">
        <span className="who">Result of {String(m.toolCallId ?? "")}</span>
        <pre>{stringifyJson(m.content, 2)}</pre>
      </li>
    );
  }
  return (
    <li className="message other">
      <pre>{stringifyJson(m, 2)}</pre>
    </li>
  );
}
