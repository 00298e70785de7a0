// JSON without rounding: a tool's arguments may hold integers past 2^53
// (account numbers, snowflake ids), which the server stores and sends to the
// tool exactly, and `JSON.parse` would round. Shown rounded, a person approves
// a number that is not the one the tool gets; edited and sent back, the
// rounded number replaces the real one.

/**
 * An integer the JSON held that a JavaScript number cannot (beyond
 * ±(2^53 − 1)): `text` is exact. `valueOf()` is the nearest double, so
 * arithmetic and comparisons still work approximately; {@link stringifyJson}
 * writes it back as it came.
 */
export class LargeInteger {
  constructor(readonly text: string) {}

  valueOf(): number {
    return Number(this.text);
  }

  toString(): string {
    return this.text;
  }

  /** What plain `JSON.stringify` writes: the nearest double, as before. */
  toJSON(): number {
    return Number(this.text);
  }
}

const INTEGER = /^-?(?:0|[1-9]\d*)$/;
// A safe integer has at most 16 digits: text without a run of 16 holds none
// that is not.
const LONG_DIGITS = /\d{16}/;

function nonce(): string {
  return Math.random().toString(36).slice(2, 12);
}

/**
 * `JSON.parse`, except that an integer literal a number cannot hold exactly
 * comes back as a {@link LargeInteger}. Throws what `JSON.parse` throws.
 */
export function parseJson(text: string): unknown {
  if (!LONG_DIGITS.test(text)) return JSON.parse(text);
  // Each such literal outside strings becomes a string marked with a NUL and
  // a fresh nonce (no string of the document can be mistaken for one), and
  // the reviver turns the marks back into LargeIntegers.
  const mark = `\u0000${nonce()}:`;
  let out = "";
  let copied = 0;
  let marked = false;
  let i = 0;
  while (i < text.length) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      // A string: skip to its closing quote.
      i++;
      while (i < text.length) {
        const d = text.charCodeAt(i);
        if (d === 0x5c) i += 2;
        else {
          i++;
          if (d === 0x22) break;
        }
      }
      continue;
    }
    if (c === 0x2d || (c >= 0x30 && c <= 0x39)) {
      let end = i + 1;
      while (end < text.length && /[0-9eE+\-.]/.test(text.charAt(end))) end++;
      const token = text.slice(i, end);
      if (INTEGER.test(token) && !Number.isSafeInteger(Number(token))) {
        out += `${text.slice(copied, i)}"\\u0000${mark.slice(1)}${token}"`;
        copied = end;
        marked = true;
      }
      i = end;
      continue;
    }
    i++;
  }
  if (!marked) return JSON.parse(text);
  out += text.slice(copied);
  return JSON.parse(out, (_key, value: unknown) =>
    typeof value === "string" && value.startsWith(mark)
      ? new LargeInteger(value.slice(mark.length))
      : value,
  );
}

/**
 * `JSON.stringify(value, null, indent)`, writing each {@link LargeInteger}
 * as the exact integer it holds.
 */
export function stringifyJson(value: unknown, indent?: number): string {
  const mark = nonce();
  let marked = false;
  const text = JSON.stringify(
    value,
    function (this: Record<string, unknown>, key: string, replaced: unknown) {
      // `replaced` is after toJSON; the holder has the value itself.
      const original = this[key];
      if (original instanceof LargeInteger) {
        marked = true;
        return `\u0000${mark}:${original.text}`;
      }
      return replaced;
    },
    indent,
  );
  if (!marked) return text;
  return text.replace(new RegExp(`"\\\\u0000${mark}:(-?\\d+)"`, "g"), "$1");
}
