// Text a model or a caller wrote, shown on a card as it is: a control
// character is invisible and a bidirectional formatting character (a
// right-to-left override, say) reorders what follows, so an approver could
// read "exe.txt" where the call says otherwise. Each is shown as its
// escape instead (`\u{202e}`), and so is a character that takes no width
// ("pay\u{200b}pal", a byte-order mark), which no one can see, and a tag
// character (U+E0000–U+E007F), which spells text to a model and nothing to
// a person. Line breaks stay where `lines` is true. The same set as the
// CLI's `shown`.

const HIDDEN =
  /[\u0000-\u001f\u007f-\u009f\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff\u{e0000}-\u{e007f}]/gu;

export function shown(text: string, lines = false): string {
  return text.replace(HIDDEN, (c) =>
    lines && c === "\n" ? c : `\\u{${c.codePointAt(0)!.toString(16)}}`,
  );
}
