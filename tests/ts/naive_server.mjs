// A TypeScript SDK server (@modelcontextprotocol/server 2.4.0) with no requestState codec: its
// deploy tool puts plain base64 JSON in requestState and trusts what comes back. Served over
// Streamable HTTP on a loopback port (printed as {"port": N} on stdout) for tests/test_proxy_ts.py.
import http from "node:http";
import {
  McpServer,
  acceptedContent,
  createMcpHandler,
  inputRequired,
} from "@modelcontextprotocol/server";
import { z } from "zod";

const handler = createMcpHandler(() => {
  const server = new McpServer({ name: "ts-naive", version: "1.0.0" });
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
          requestState: Buffer.from(JSON.stringify({ env })).toString("base64"),
        });
      }
      const state = ctx.mcpReq.requestState();
      const decoded = JSON.parse(Buffer.from(String(state), "base64").toString("utf-8"));
      return { content: [{ type: "text", text: `deployed ${decoded.env}` }] };
    },
  );
  return server;
});

const server = http.createServer(async (req, res) => {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  const hasBody = !["GET", "HEAD"].includes(req.method);
  const headers = new Headers();
  for (const [name, value] of Object.entries(req.headers)) {
    if (value !== undefined) headers.set(name, Array.isArray(value) ? value.join(", ") : value);
  }
  const request = new Request(`http://${req.headers.host}${req.url}`, {
    method: req.method,
    headers,
    body: hasBody ? Buffer.concat(chunks) : undefined,
  });
  const response = await handler.fetch(request);
  res.writeHead(response.status, Object.fromEntries(response.headers));
  if (response.body) {
    for await (const chunk of response.body) res.write(chunk);
  }
  res.end();
});

server.listen(0, "127.0.0.1", () => {
  console.log(JSON.stringify({ port: server.address().port }));
});
