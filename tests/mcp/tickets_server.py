"""A ticketing MCP server for agentenkit's tests, written with PyPI's `mcp`.

    tickets_server.py stdio LOG [SCHEMA]
    tickets_server.py http PORT LOG

With a file SCHEMA that says `v2`, `close_ticket` takes `ticket` where it
took `id`: the same server, deployed again with another schema.

Tools: annotated read-only (`search_tickets`), annotated destructive
(`close_ticket`), unannotated (`create_ticket`), one whose calls fail
(`flaky`), one that takes its time (`slow`), and tools that misbehave on
purpose (`hang`, `exit_now`, `garbage`). `escalate_ticket` asks the
person two rounds of questions before it finishes (the 2026-07-28
`input_required` result, its state carried in `requestState`); `sign_in`
sends the person to a sign-in page (a URL-mode elicitation); `settle`
first asks only to be called again with its state; `redeploy` changes
`close_ticket`'s schema in place and says the tools changed. `research` runs as a
task (the Tasks extension, SEP-2663) for a client that declares the
extension: it works for `seconds`, then (with `ask`) asks which sources
to use and works as long again, then ends with its findings;
`tasks/get`, `tasks/update` and `tasks/cancel` are logged like calls.

Every call appends a JSON line to the file LOG: the tool, its arguments,
the `_meta` the client sent and the names of the variables in the
server's environment and the `X-Tickets-Token` header it was sent (over
HTTP), so a test can tell how often a call reached the server, with which
idempotency key, and what the server was given.
"""

import json
import os
import sys
import time
import uuid
from datetime import datetime, timezone
from typing import Any

from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import (
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitRequestURLParams,
    InputRequiredResult,
    RequestParams,
    ToolAnnotations,
)
from pydantic import BaseModel

class Ticket(BaseModel):
    id: str
    title: str


class Found(BaseModel):
    tickets: list[Ticket]


TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
LOG = "/dev/null"


def log_line(line: dict) -> None:
    with open(LOG, "a", encoding="utf-8") as log:
        log.write(json.dumps(line) + "\n")


def now() -> str:
    return datetime.now(timezone.utc).isoformat()


class TaskRef(RequestParams):
    task_id: str


class TaskUpdate(RequestParams):
    task_id: str
    input_responses: dict[str, Any]


class Tasks(Extension):
    """The Tasks extension for `research`: a task's state follows from the
    clock (it works for `seconds` at a time), so nothing runs between
    requests."""

    identifier = TASKS_EXTENSION

    def __init__(self) -> None:
        self.tasks: dict[str, dict] = {}

    def methods(self):
        return [
            MethodBinding("tasks/get", TaskRef, self.get),
            MethodBinding("tasks/update", TaskUpdate, self.update),
            MethodBinding("tasks/cancel", TaskRef, self.cancel),
        ]

    async def intercept_tool_call(self, params, ctx, call_next):
        meta = params.meta or {}
        declared = TASKS_EXTENSION in ((meta.get(CLIENT_CAPABILITIES) or {}).get("extensions") or {})
        if params.name != "research" or not declared:
            return await call_next(ctx)
        arguments = params.arguments or {}
        task_id = f"task-{uuid.uuid4().hex[:12]}"
        self.tasks[task_id] = {
            "topic": arguments.get("topic", ""),
            "seconds": float(arguments.get("seconds", 1)),
            "ask": bool(arguments.get("ask", False)),
            "started": time.monotonic(),
            "created": now(),
            "answer": None,
            "cancelled": False,
        }
        log_line({"tool": "research", "arguments": arguments, "meta": dict(meta), "task": task_id})
        return {"resultType": "task", **self.seen(task_id)}

    def seen(self, task_id: str) -> dict:
        """The task as `tasks/get` shows it now."""
        task = self.tasks[task_id]
        base = {
            "taskId": task_id,
            "createdAt": task["created"],
            "lastUpdatedAt": now(),
            "ttlMs": 600_000,
            "pollIntervalMs": 100,
        }
        if task["cancelled"]:
            return {**base, "status": "cancelled"}
        elapsed = time.monotonic() - task["started"]
        if elapsed < task["seconds"]:
            return {**base, "status": "working", "statusMessage": f"reading about {task['topic']}"}
        if task["ask"] and task["answer"] is None:
            sources = {
                "sources": {
                    "type": "string",
                    "title": "Which sources?",
                    "oneOf": [{"const": "papers", "title": "Papers"}, {"const": "news", "title": "News"}],
                }
            }
            asked = form(f"Researching {task['topic']}.", sources, ["sources"])
            return {
                **base,
                "status": "input_required",
                "inputRequests": {"sources": asked.model_dump(mode="json", by_alias=True, exclude_none=True)},
            }
        if task["answer"] is not None and time.monotonic() - task["answered"] < task["seconds"]:
            return {**base, "status": "working", "statusMessage": "reading the sources"}
        answer = task["answer"] or {}
        if task["topic"] == "fail":
            return {**base, "status": "failed", "error": {"code": -32603, "message": "the library is closed"}}
        findings = {"topic": task["topic"], "sources": (answer.get("content") or {}).get("sources"), "action": answer.get("action")}
        result = {"content": [{"type": "text", "text": json.dumps(findings, sort_keys=True)}], "isError": False}
        return {**base, "status": "completed", "result": result}

    def known(self, task_id: str) -> None:
        if task_id not in self.tasks:
            from mcp.shared.exceptions import MCPError

            raise MCPError(code=-32602, message=f"no task {task_id}")

    async def get(self, ctx, params: TaskRef):
        log_line({"method": "tasks/get", "task": params.task_id})
        self.known(params.task_id)
        return {"resultType": "complete", **self.seen(params.task_id)}

    async def update(self, ctx, params: TaskUpdate):
        log_line({"method": "tasks/update", "task": params.task_id, "responses": params.input_responses})
        self.known(params.task_id)
        task = self.tasks[params.task_id]
        if task["answer"] is None and "sources" in params.input_responses:
            task["answer"] = params.input_responses["sources"]
            task["answered"] = time.monotonic()
        return {"resultType": "complete"}

    async def cancel(self, ctx, params: TaskRef):
        log_line({"method": "tasks/cancel", "task": params.task_id})
        self.known(params.task_id)
        self.tasks[params.task_id]["cancelled"] = True
        return {"resultType": "complete"}


server = MCPServer("tickets", extensions=[Tasks()])


def record(tool: str, ctx: Context, **arguments) -> None:
    path = LOG
    meta = ctx.request_context.meta
    if meta is not None and not isinstance(meta, dict):
        meta = meta.model_dump(mode="json", by_alias=True, exclude_none=True)
    headers = ctx.headers or {}
    line = {
        "tool": tool,
        "arguments": arguments,
        "meta": meta or {},
        "env": sorted(os.environ),
        "token": headers.get("x-tickets-token"),
    }
    with open(path, "a", encoding="utf-8") as log:
        log.write(json.dumps(line) + "\n")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True), structured_output=True)
def search_tickets(query: str, ctx: Context) -> Found:
    """Find tickets whose title contains the query."""
    record("search_tickets", ctx, query=query)
    return Found(tickets=[Ticket(id="T-1", title=f"printer on fire ({query})")])


def close_ticket_v1(id: str, ctx: Context) -> str:
    """Close a ticket for good."""
    record("close_ticket", ctx, id=id)
    return f"closed {id}"


def close_ticket_v2(ticket: str, ctx: Context) -> str:
    """Close a ticket for good (its id is now `ticket`)."""
    record("close_ticket", ctx, ticket=ticket)
    return f"closed {ticket}"


@server.tool()
def create_ticket(title: str, ctx: Context) -> str:
    """Open a ticket (no annotations: a client should ask first)."""
    record("create_ticket", ctx, title=title)
    return f"created T-2: {title}"


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def flaky(ctx: Context) -> str:
    """Always fails, as a tool error the model sees."""
    record("flaky", ctx)
    raise ToolError("the ticket database is read-only today")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def big(size: int, ctx: Context) -> str:
    """Answers `size` characters."""
    record("big", ctx, size=size)
    return "x" * size


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def slow(seconds: float, ctx: Context) -> str:
    """Answers after `seconds`."""
    record("slow", ctx, seconds=seconds)
    time.sleep(seconds)
    return f"slept {seconds}s"


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def hang(ctx: Context) -> str:
    """Never answers."""
    record("hang", ctx)
    time.sleep(3600)
    return "too late"


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def exit_now(ctx: Context) -> str:
    """The server process exits in the middle of the call."""
    record("exit_now", ctx)
    os._exit(3)


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def garbage(ctx: Context) -> str:
    """Writes a line that is not JSON-RPC where the answer belongs (stdio)."""
    record("garbage", ctx)
    sys.stdout.write("}}} this is not JSON-RPC {{{\n")
    sys.stdout.flush()
    time.sleep(3600)
    return "unreachable"


def form(message: str, properties: dict, required: list[str]) -> ElicitRequest:
    schema = {"type": "object", "properties": properties, "required": required}
    return ElicitRequest(
        method="elicitation/create",
        params=ElicitRequestFormParams(mode="form", message=message, requested_schema=schema),
    )


DETAILS = {
    "team": {
        "type": "string",
        "title": "Which team takes it?",
        "oneOf": [{"const": "ops", "title": "Operations"}, {"const": "dev", "title": "Development"}],
    },
    "reason": {"type": "string", "title": "Why?", "minLength": 3, "maxLength": 200},
    "hours": {"type": "integer", "title": "Within how many hours?", "minimum": 1, "maximum": 72, "default": 24},
    "page": {"type": "boolean", "title": "Page someone now?", "default": False},
    "tags": {
        "type": "array",
        "title": "Tags",
        "items": {"type": "string", "enum": ["printer", "network", "urgent"]},
        "default": ["printer"],
    },
}


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def escalate_ticket(id: str, ctx: Context) -> str | InputRequiredResult:
    """Escalates a ticket after asking the person who takes it and why, then to confirm."""
    responses = ctx.input_responses or {}
    state = json.loads(ctx.request_state) if ctx.request_state else {"round": 0}
    answers = {key: dict(value) if isinstance(value, dict) else value.model_dump(mode="json", exclude_none=True)
               for key, value in responses.items()}
    record("escalate_ticket", ctx, id=id, round=state["round"], responses=answers)
    if state["round"] == 0:
        return InputRequiredResult(
            input_requests={"details": form(f"Escalating {id}.", DETAILS, ["team", "reason"])},
            request_state=json.dumps({"round": 1}),
        )
    if state["round"] == 1:
        details = answers.get("details", {})
        if details.get("action") != "accept":
            return f"not escalated: the person chose {details.get('action')}"
        confirm = {"go": {"type": "boolean", "title": f"Escalate {id} to {details['content']['team']}?"}}
        return InputRequiredResult(
            input_requests={"confirm": form("Last check.", confirm, ["go"])},
            request_state=json.dumps({"round": 2, "details": details["content"]}),
        )
    confirm = answers.get("confirm", {})
    if confirm.get("action") != "accept" or not confirm.get("content", {}).get("go"):
        return f"not escalated: the person chose {confirm.get('action')} at the last check"
    details = state["details"]
    return json.dumps({"escalated": id, **details}, sort_keys=True)


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def research(topic: str, ctx: Context, seconds: float = 1, ask: bool = False) -> str:
    """Researches a topic: a task, for a client that takes tasks."""
    record("research", ctx, topic=topic, seconds=seconds, ask=ask)
    return f"researched {topic} at once"


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
async def redeploy(ctx: Context) -> str:
    """Deploys close_ticket's next schema (`ticket` for `id`) in place, and
    tells the clients listening that the tools changed."""
    record("redeploy", ctx)
    server.remove_tool("close_ticket")
    server.tool(
        name="close_ticket",
        annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True),
    )(close_ticket_v2)
    await ctx.notify_tools_changed()
    return "redeployed"


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def sign_in(ctx: Context) -> str | InputRequiredResult:
    """Sends the person to a sign-in page (a URL-mode elicitation), then
    says whether they went."""
    responses = ctx.input_responses or {}
    answers = {key: dict(value) if isinstance(value, dict) else value.model_dump(mode="json", exclude_none=True)
               for key, value in responses.items()}
    record("sign_in", ctx, responses=answers)
    if "sso" not in answers:
        page = ElicitRequest(
            method="elicitation/create",
            params=ElicitRequestURLParams(
                mode="url",
                message="Sign in to the ticket system.",
                url="https://sso.example.com/start?client=tickets",
                elicitation_id="sso-1",
            ),
        )
        return InputRequiredResult(input_requests={"sso": page}, request_state="signing-in")
    return f"sign-in: {answers['sso'].get('action')}"


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def settle(ctx: Context) -> str | InputRequiredResult:
    """Asks nobody anything: first only to be called again with its state."""
    record("settle", ctx, state=ctx.request_state)
    if ctx.request_state is None:
        return InputRequiredResult(request_state="warmed")
    return f"settled after {ctx.request_state}"


if __name__ == "__main__":
    args = sys.argv[1:]
    schema = "v1"
    if len(args) == 3 and args[0] == "stdio":
        with open(args[2], encoding="utf-8") as f:
            schema = f.read().strip()
        args = args[:2]
    close_ticket = close_ticket_v2 if schema == "v2" else close_ticket_v1
    server.tool(
        name="close_ticket",
        annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True),
    )(close_ticket)
    if len(args) == 2 and args[0] == "stdio":
        LOG = args[1]
        server.run("stdio")
    elif len(args) == 3 and args[0] == "http":
        LOG = args[2]
        server.run("streamable-http", host="127.0.0.1", port=int(args[1]))
    else:
        sys.exit(f"usage: {sys.argv[0]} stdio LOG | http PORT LOG")
