// The page's pure helpers: the time left as text, and which answers a
// question card sends.

import { describe, expect, it } from "vitest";

import { isApproval } from "../src/InputCard";
import { changedAnswers } from "../src/QuestionForm";
import { shown } from "../src/shown";
import { formatTimeLeft } from "../src/TimeLeft";

describe("formatTimeLeft", () => {
  it("reads minutes from ten minutes up, m:ss below, hours past an hour", () => {
    expect(formatTimeLeft(15 * 60_000)).toBe("15 min left");
    expect(formatTimeLeft(14 * 60_000 + 59_999)).toBe("14 min left");
    expect(formatTimeLeft(10 * 60_000)).toBe("10 min left");
    expect(formatTimeLeft(10 * 60_000 - 1)).toBe("09:59 left");
    expect(formatTimeLeft(65_000)).toBe("01:05 left");
    expect(formatTimeLeft(999)).toBe("00:00 left");
    expect(formatTimeLeft(0)).toBe("expiring");
    expect(formatTimeLeft(-5)).toBe("expiring");
    expect(formatTimeLeft(2 * 3_600_000 + 5 * 60_000)).toBe("2 h 5 min left");
    expect(formatTimeLeft(24 * 3_600_000)).toBe("24 h left");
  });
});

describe("changedAnswers", () => {
  const questions = [
    { id: "scope", prompt: "How wide?", options: [], defaults: ["module"] },
    { id: "checks", prompt: "Which?", options: [], multiple: true, defaults: ["tests", "lint"] },
    { id: "free", prompt: "Anything?", options: [] },
  ];

  it("sends only what differs from the defaults, as sets", () => {
    expect(changedAnswers(questions, { scope: ["module"], checks: ["lint", "tests"], free: [] })).toEqual({});
    expect(changedAnswers(questions, { scope: ["repo"], checks: ["tests", "lint"], free: [] })).toEqual({
      scope: ["repo"],
    });
    // Unticking every default is an explicit "none", not a default.
    expect(changedAnswers(questions, { scope: ["module"], checks: [], free: [] })).toEqual({ checks: [] });
    expect(changedAnswers(questions, { scope: ["module"], checks: ["tests", "lint", "docs"], free: ["x"] })).toEqual({
      checks: ["tests", "lint", "docs"],
      free: ["x"],
    });
  });
});

describe("shown", () => {
  it("shows control and bidi formatting characters as their escapes", () => {
    expect(shown("send_email")).toBe("send_email");
    expect(shown("invoice\u202egnp.exe")).toBe("invoice\\u{202e}gnp.exe");
    expect(shown("a\u2066b\u2069")).toBe("a\\u{2066}b\\u{2069}");
    expect(shown("pay\u200bpal")).toBe("pay\\u{200b}pal");
    expect(shown("ok\u{e0068}\u{e0069}")).toBe("ok\\u{e0068}\\u{e0069}");
    expect(shown("\ufeffa\u2060b\u00ad")).toBe("\\u{feff}a\\u{2060}b\\u{ad}");
    expect(shown("x\u009by\u0007")).toBe("x\\u{9b}y\\u{7}");
    expect(shown("one\ntwo")).toBe("one\\u{a}two");
    expect(shown("one\ntwo", true)).toBe("one\ntwo");
    expect(shown("é, ü, 日本")).toBe("é, ü, 日本");
  });
});

describe("isApproval", () => {
  const input = (kind: string, reason: string) => ({ kind, reason }) as unknown as Parameters<typeof isApproval>[0];

  it("goes by the request's kind, whatever its reason says", () => {
    expect(isApproval(input("approval", "approval"))).toBe(true);
    expect(isApproval(input("approval", "wire"))).toBe(true);
    // A tool that parked itself with the reason "approval" is a job.
    expect(isApproval(input("park", "approval"))).toBe(false);
    expect(isApproval(input("ask", "approval"))).toBe(false);
  });
});
