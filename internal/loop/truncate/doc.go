// Package truncate shortens tool output before it is sent to the model, as
// seed 000 §5 prescribes: character truncation first (head/tail or tail, with
// the spec's exact warning markers), then line truncation
// ("[... N lines omitted ...]"). Limits are counted in characters (Unicode
// code points), never splitting a UTF-8 sequence.
package truncate
