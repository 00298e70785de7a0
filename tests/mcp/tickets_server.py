"""A ticketing MCP server for agentenkit's tests, written with PyPI's `mcp`.

    tickets_server.py stdio LOG [SCHEMA]
    tickets_server.py http PORT LOG

With a file SCHEMA that says `v2`, `close_ticket` takes `ticket` where it
took `id`: the same server, deployed again with another schema.

Tools: annotated read-only (`search_tickets`), annotated destructive
(`close_ticket`), unannotated (`create_ticket`), one whose calls fail
(`flaky`), and tools that misbehave on purpose (`hang`, `exit_now`,
`garbage`), and one that asks the person two rounds of questions before
it finishes (`escalate_ticket`: the 2026-07-28 `input_required` result,
its state carried in `requestState`), and one that first asks only to be
called again with its state (`settle`). Every call appends a JSON line to the file LOG: the tool, its
arguments, the `_meta` the client sent and the names of the variables in
the server's environment and the `X-Tickets-Token` header it was sent (over
HTTP), so a test can tell how often a call reached the server, with which
idempotency key, and what the server was given.
"""

import json
import os
import sys
import time

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import (
    ElicitRequest,
    ElicitRequestFormParams,
    InputRequiredResult,
    ToolAnnotations,
)
from pydantic import BaseModel

class Ticket(BaseModel):
    id: str
    title: str


class Found(BaseModel):
    tickets: list[Ticket]


server = MCPServer("tickets")
LOG = "/dev/null"


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
