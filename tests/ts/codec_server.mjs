// A TypeScript SDK server (@modelcontextprotocol/server 2.4.0) whose requestState is sealed by the
// SDK's own createRequestStateCodec, served over Streamable HTTP on a loopback port (printed as
// {"port": N}) for tests/test_probe.py. Argument 1: "bind" binds each state to the method and
// the caller (the X-User header, handed to the SDK as authInfo.clientId, as a bearer gate would),
// "plain" binds nothing. Argument 2: the codec's TTL in seconds.
import http from "node:http";
import {
  McpServer,
  acceptedContent,
  createMcpHandler,
  createRequestStateCodec,
  inputRequired,
} from "@modelcontextprotocol/server";
import { z } from "zod";

const bound = process.argv[2] === "bind";
const ttlSeconds = Number(process.argv[3] ?? "60");
const codec = createRequestStateCodec({
  key: "probe-test-key-".padEnd(40, "k"),
  ttlSeconds,
  ...(bound
    ? { bind: (ctx) => `${ctx.mcpReq.method}\0${ctx.http?.authInfo?.clientId ?? ""}` }
    : {}),
});

const handler = createMcpHandler(() => {
  const server = new McpServer(
    { name: bound ? "ts-codec-bind" : "ts-codec", version: "2.4.0" },
    { requestState: { verify: codec.verify } },
  );
  server.registerTool(
    "deploy",
    { inputSchema: z.object({ env: z.string() }) },
    async ({ env }, ctx) => {
      const answer = acceptedContent(ctx.mcpReq.inputResponses, "confirm");
      if (answer === undefined) {
        return inputRequired({
          inputRequests: {
            confirm: inputRequired.elicit({
              message: `Deploy ${env}?`,
              requestedSchema: z.object({ ok: z.boolean() }),
            }),
          },
          requestState: await codec.mint({ env }, ctx),
        });
      }
      const state = ctx.mcpReq.requestState();
      return { content: [{ type: "text", text: `deployed ${state.env}` }] };
    },
  );
  return server;
});

const server = http.createServer(async (req, res) => {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  const headers = new Headers();
  for (const [name, value] of Object.entries(req.headers)) {
    if (value !== undefined) headers.set(name, Array.isArray(value) ? value.join(", ") : value);
  }
  const hasBody = !["GET", "HEAD"].includes(req.method);
  const request = new Request(`http://${req.headers.host}${req.url}`, {
    method: req.method,
    headers,
    body: hasBody ? Buffer.concat(chunks) : undefined,
  });
  const user = req.headers["x-user"];
  const extra = user ? { authInfo: { token: "test", clientId: String(user), scopes: [] } } : {};
  const response = await handler.fetch(request, extra);
  res.writeHead(response.status, Object.fromEntries(response.headers));
  if (response.body) {
    for await (const chunk of response.body) res.write(chunk);
  }
  res.end();
});

server.listen(0, "127.0.0.1", () => {
  console.log(JSON.stringify({ port: server.address().port }));
});
