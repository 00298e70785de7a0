// Server-sent events over fetch: a browser `EventSource` cannot send a
// bearer key, so the stream is read from a fetch body and parsed here.

export interface SseEvent {
  id?: string;
  event: string;
  data: string;
}

/** An incremental parser of the `text/event-stream` format: feed it text as
 * it arrives (in pieces cut anywhere); it returns the events completed. */
export class SseParser {
  private buffer = "";
  private id: string | undefined;
  private event = "";
  private data: string[] = [];

  push(text: string): SseEvent[] {
    this.buffer += text;
    const out: SseEvent[] = [];
    for (;;) {
      const end = this.lineEnd();
      if (end === null) break;
      const [at, width] = end;
      const line = this.buffer.slice(0, at);
      this.buffer = this.buffer.slice(at + width);
      const event = this.line(line);
      if (event) out.push(event);
    }
    return out;
  }

  /** Where the first complete line ends (CRLF, LF or CR), if any. A lone
   * CR at the end of the buffer may be the first half of a CRLF: wait. */
  private lineEnd(): [number, number] | null {
    for (let i = 0; i < this.buffer.length; i++) {
      const c = this.buffer[i];
      if (c === "\n") return [i, 1];
      if (c === "\r") {
        if (i + 1 === this.buffer.length) return null;
        return [i, this.buffer[i + 1] === "\n" ? 2 : 1];
      }
    }
    return null;
  }

  private line(line: string): SseEvent | null {
    if (line === "") {
      if (this.data.length === 0) {
        this.event = "";
        return null;
      }
      const event: SseEvent = { id: this.id, event: this.event || "message", data: this.data.join("\n") };
      this.event = "";
      this.data = [];
      return event;
    }
    if (line.startsWith(":")) return null; // a comment (keep-alive)
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") this.data.push(value);
    else if (field === "event") this.event = value;
    else if (field === "id" && !value.includes("\0")) this.id = value;
    return null;
  }
}
