// An MCP-shaped Streamable HTTP endpoint whose request body is read by express.json() (express 5,
// body-parser 2): the reader the TypeScript SDK's createMcpExpressApp mounts. It honours the
// charset a Content-Type names (any "utf-*", UTF-7 included, via iconv-lite), inflates a
// Content-Encoding (gzip, deflate, br) and drops a UTF-8 BOM; tests/test_proxy_body_readers.py
// checks that the proxy forwards nothing this reader could read otherwise than the proxy did.
//
//   node express_reader.mjs FOLDER    (FOLDER: where express is installed, in node_modules)
//
// Prints {"port": N} on stdout once listening on loopback. POST /mcp: a "deploy" tool that, like
// the spec's naive example, puts plain base64 JSON in requestState and trusts what comes back.
// Every request is recorded under its X-Variant-Case header: "arrived" before its body is read,
// then what the handler did ("asked" with the state it issued, "retried" with the requestState
// it was handed and the state it decoded from it, "unread" when the body reader refused).
// GET /events?case=NAME (on this port, not through the proxy) answers that case's records.
import { randomUUID } from "node:crypto";
import { createRequire } from "node:module";
import path from "node:path";

const folder = process.argv[2];
if (!folder) {
  console.error("usage: node express_reader.mjs FOLDER (where express is installed)");
  process.exit(2);
}
const require = createRequire(path.join(path.resolve(folder), "package.json"));
const express = require("express");

const events = [];
const record = (req, event, fields = {}) => {
  events.push({ case: req.get("x-variant-case") ?? null, event, ...fields });
};

const reply = (res, status, message) => res.status(status).json(message);

function deploy(req, res) {
  const message = req.body;
  if (message === null || typeof message !== "object" || Array.isArray(message)) {
    // express.json() skipped the body (another media type, none): nothing was read
    record(req, "unread", { why: "no JSON object read", got: typeof message });
    return reply(res, 400, {
      jsonrpc: "2.0",
      id: null,
      error: { code: -32700, message: "no JSON-RPC message read" },
    });
  }
  const params = message.params ?? {};
  if (message.method !== "tools/call" || params.name !== "deploy") {
    return reply(res, 200, {
      jsonrpc: "2.0",
      id: message.id ?? null,
      error: { code: -32601, message: `no method ${message.method}` },
    });
  }
  const env = params.arguments?.env ?? null;
  if (params.requestState === undefined) {
    const state = { env, nonce: randomUUID() };
    record(req, "asked", { state });
    return reply(res, 200, {
      jsonrpc: "2.0",
      id: message.id,
      result: {
        resultType: "input_required",
        inputRequests: {
          confirm: {
            method: "elicitation/create",
            params: { message: `Deploy ${env}?`, requestedSchema: {} },
          },
        },
        requestState: Buffer.from(JSON.stringify(state)).toString("base64"),
      },
    });
  }
  let state = null;
  try {
    state = JSON.parse(Buffer.from(String(params.requestState), "base64").toString("utf-8"));
  } catch {
    state = null; // a state this server never issued: still, the handler was handed it
  }
  record(req, "retried", { requestState: params.requestState, state });
  return reply(res, 200, {
    jsonrpc: "2.0",
    id: message.id,
    result: { content: [{ type: "text", text: `deployed ${state?.env}` }] },
  });
}

const app = express();
app.post(
  "/mcp",
  (req, _res, next) => {
    record(req, "arrived");
    next();
  },
  express.json(),
  deploy,
);
app.get("/events", (req, res) => {
  res.json(events.filter((event) => event.case === req.query.case));
});
// body-parser's refusals (a charset it lacks, a body that is not JSON): recorded, then answered
app.use((err, req, res, _next) => {
  record(req, "unread", { why: String(err.type ?? err.message), status: err.status ?? 500 });
  reply(res, err.status ?? 500, {
    jsonrpc: "2.0",
    id: null,
    error: { code: -32700, message: `body not read: ${err.type ?? err.message}` },
  });
});

const server = app.listen(0, "127.0.0.1", () => {
  console.log(JSON.stringify({ port: server.address().port }));
});
