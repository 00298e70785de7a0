import { describe, expect, it } from "vitest";

import { SseParser } from "../src/sse";

const STREAM =
  ": keep-alive\n\n" +
  "id: 1\nevent: RUN_STARTED\ndata: {\"a\":1}\n\n" +
  "id: 2\r\nevent: MESSAGE\r\ndata: line one\r\ndata: line two\r\n\r\n" +
  "id: 3\revent: INPUT_REQUIRED\rdata:no space\r\r" +
  "data: without id or event\n\n";

const EXPECTED = [
  { id: "1", event: "RUN_STARTED", data: '{"a":1}' },
  { id: "2", event: "MESSAGE", data: "line one\nline two" },
  { id: "3", event: "INPUT_REQUIRED", data: "no space" },
  // The id carries over (the last one set), the type does not.
  { id: "3", event: "message", data: "without id or event" },
];

describe("SseParser", () => {
  it("parses LF, CRLF and CR line ends, comments and multi-line data", () => {
    expect(new SseParser().push(STREAM)).toEqual(EXPECTED);
  });

  it("gives the same events whichever way the stream is cut", () => {
    for (let cut = 0; cut <= STREAM.length; cut++) {
      for (const width of [1, 3, 7]) {
        const parser = new SseParser();
        const events = [
          ...parser.push(STREAM.slice(0, cut)),
          ...chunks(STREAM.slice(cut), width).flatMap((piece) => parser.push(piece)),
        ];
        expect(events, `cut at ${cut}, pieces of ${width}`).toEqual(EXPECTED);
      }
    }
  });

  it("holds back an event until its blank line arrives", () => {
    const parser = new SseParser();
    expect(parser.push("id: 9\ndata: x\n")).toEqual([]);
    expect(parser.push("\n")).toEqual([{ id: "9", event: "message", data: "x" }]);
  });
});

function chunks(text: string, width: number): string[] {
  const out: string[] = [];
  for (let i = 0; i < text.length; i += width) out.push(text.slice(i, i + width));
  return out;
}
