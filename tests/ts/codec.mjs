// Drive the TypeScript SDK's createRequestStateCodec for tests/test_ts_sdk.py.
// Reads one JSON request on stdin: {"key", "mode": "mint"|"verify", "payload"?, "token"?, "bind"?}
// and prints {"token"} or {"payload"} or {"error"} on stdout.
import { createRequestStateCodec } from "@modelcontextprotocol/server";

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const request = JSON.parse(Buffer.concat(chunks).toString("utf-8"));
const options = { key: request.key, ttlSeconds: 300 };
if (request.bind !== undefined && request.bind !== null) options.bind = () => request.bind;
const codec = createRequestStateCodec(options);
try {
  if (request.mode === "mint") {
    console.log(JSON.stringify({ token: await codec.mint(request.payload, {}) }));
  } else {
    console.log(JSON.stringify({ payload: await codec.verify(request.token, {}) }));
  }
} catch (error) {
  console.log(JSON.stringify({ error: String(error.message) }));
}
