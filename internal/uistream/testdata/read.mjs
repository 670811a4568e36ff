// Reads an AI SDK UI message stream (SSE) from stdin with the AI SDK's own
// client code (package ai: parseJsonEventStream with uiMessageChunkSchema,
// then readUIMessageStream) and prints {chunks, message} as JSON: the
// number of chunks accepted and the last message rebuilt. Any chunk the
// schema or the reader refuses makes it exit non-zero.
// Run by reader_test.go when UISTREAM_AI_SDK names a directory whose
// node_modules holds ai@6.
import { parseJsonEventStream, uiMessageChunkSchema, readUIMessageStream } from 'ai';

const input = [];
for await (const b of process.stdin) input.push(b);
const body = Buffer.concat(input);
const bytes = new ReadableStream({ start(c) { c.enqueue(new Uint8Array(body)); c.close(); } });
let chunks = 0;
const parsed = parseJsonEventStream({ stream: bytes, schema: uiMessageChunkSchema }).pipeThrough(new TransformStream({
  transform(r, c) {
    if (!r.success) throw new Error(`chunk ${chunks} refused: ${r.error}`);
    chunks++;
    c.enqueue(r.value);
  },
}));
let message;
for await (const m of readUIMessageStream({ stream: parsed, terminateOnError: true })) message = m;
process.stdout.write(JSON.stringify({ chunks, message }));
