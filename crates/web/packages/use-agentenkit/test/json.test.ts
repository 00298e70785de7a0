import { describe, expect, it } from "vitest";

import { LargeInteger, parseJson, stringifyJson } from "../src/json";

describe("parseJson and stringifyJson", () => {
  it("keep integers past 2^53 exact, and everything else as JSON.parse does", () => {
    const text = '{"account":12345678901234567890,"neg":-9007199254740993,"safe":9007199254740991,"f":1.5,"s":"12345678901234567890"}';
    const parsed = parseJson(text) as Record<string, unknown>;
    expect(parsed.account).toBeInstanceOf(LargeInteger);
    expect(String(parsed.account)).toBe("12345678901234567890");
    expect((parsed.neg as LargeInteger).text).toBe("-9007199254740993");
    expect(parsed.safe).toBe(9007199254740991);
    expect(parsed.f).toBe(1.5);
    expect(parsed.s).toBe("12345678901234567890");
    expect(stringifyJson(parsed)).toBe(text);
    // Plain JSON.stringify still writes a number (the nearest double).
    expect(JSON.stringify(parsed.account)).toBe("12345678901234567000");
  });

  it("does not mistake strings, escapes or decimals for integers", () => {
    for (const text of [
      '["a \\" 12345678901234567890", 1]',
      '{"k\\\\":"\\\\12345678901234567890"}',
      "[1234567890123456789.5, 12345678901234567890e2, -0]",
      '"\\u0000x:12345678901234567890"',
    ]) {
      expect(parseJson(text)).toEqual(JSON.parse(text));
    }
  });

  it("indents as JSON.stringify does and writes a top-level large integer", () => {
    const value = { a: [new LargeInteger("99999999999999999999"), { b: 1 }] };
    expect(stringifyJson(value, 2)).toBe(
      JSON.stringify({ a: [0, { b: 1 }] }, null, 2).replace("0", "99999999999999999999"),
    );
    expect(stringifyJson(new LargeInteger("-12345678901234567890"))).toBe("-12345678901234567890");
  });

  it("throws on what JSON.parse throws on", () => {
    for (const text of ["{", "[12345678901234567890", "12345678901234567890 x", ""]) {
      expect(() => parseJson(text)).toThrow(SyntaxError);
    }
  });

  it("round-trips random documents", () => {
    // A small linear congruential generator: the same documents every run.
    let seed = 42;
    const next = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2147483648;
      return seed % n;
    };
    const digits = (n: number) =>
      String(1 + next(9)) + Array.from({ length: n - 1 }, () => String(next(10))).join("");
    const value = (depth: number): string => {
      switch (depth > 3 ? next(4) : next(6)) {
        case 0:
          return (next(2) ? "-" : "") + digits(1 + next(30));
        case 1:
          return `"${digits(1 + next(25))}\\"${next(2) ? "\\\\" : ""}"`;
        case 2:
          return String(next(1000) / 7);
        case 3:
          return ["true", "false", "null"][next(3)] ?? "null";
        case 4:
          return `[${Array.from({ length: next(4) }, () => value(depth + 1)).join(",")}]`;
        default:
          return `{${Array.from({ length: next(4) }, (_, i) => `"k${i}":${value(depth + 1)}`).join(",")}}`;
      }
    };
    for (let n = 0; n < 500; n++) {
      const text = value(0);
      const parsed = parseJson(text);
      // Written back, it reads the same again, and as JSON.parse reads it
      // wherever no large integer was.
      expect(parseJson(stringifyJson(parsed))).toEqual(parsed);
      expect(JSON.parse(stringifyJson(parsed))).toEqual(JSON.parse(text));
      // Every integer literal of the text is in the output, exactly.
      for (const literal of text.replace(/"(?:[^"\\]|\\.)*"/g, "").match(/-?\d{17,}(?![.\d])/g) ?? []) {
        expect(stringifyJson(parsed)).toContain(literal);
      }
    }
  });
});
