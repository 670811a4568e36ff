// Package patch parses and applies apply_patch patches in the v4a format of
// seed 000 Appendix A (the format codex-rs models are trained on).
//
// Parse turns patch text into Operations (Add File, Delete File, Update File
// with optional Move to, hunks with an optional "@@ context hint" and an
// optional "*** End of File" marker). Apply runs a parsed patch against any
// Store (a tiny file interface the caller adapts to its environment).
//
// Hunks are located by their context and removed lines, searching forward
// from the end of the previous hunk (after the hint line when a hint is
// given). Matching tries, in order: exact, ignoring trailing whitespace,
// ignoring all whitespace differences, and additionally treating Unicode
// punctuation (smart quotes, dashes, non-breaking spaces) as its ASCII
// equivalent. The level used is reported per file as a Fuzz. Without a hint, a
// hunk whose lines match more than one place is rejected as ambiguous; with a
// hint, the first match after the hint wins. Context lines keep the file's
// own text, so fuzzy matches never rewrite lines the patch did not change.
//
// Apply is all-or-nothing: every operation is validated and every resulting
// file computed in memory first; the store is only written when the whole
// patch succeeded. If a write fails part-way, Apply restores the files it had
// already changed (best effort) and reports the failure.
//
// Policy choices (documented because codex-rs differs in places):
//   - Add File onto an existing file is refused (use Update File).
//   - Update File with only "*** Move to:" and no hunks is a pure rename.
//   - An addition-only hunk with a hint inserts right after the hint line;
//     without a hint it appends at the end of the file.
//   - CRLF files keep CRLF line endings; a file's final-newline state is kept.
package patch
