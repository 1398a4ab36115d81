// A minimal MCP client over a child's stdin/stdout (newline-delimited JSON-RPC), enough to start a
// `resource-plane serve --control stdio` session, learn its URL and call `share-file` through the
// CLI's own control channel — the way a runtime mints a handle.

export function mcpClient(child, label) {
  let buffered = '';
  let nextId = 1;
  const pending = new Map();
  const notes = [];
  const noteWaiters = [];
  child.stdout.setEncoding('utf8');
  child.stdout.on('data', (chunk) => {
    buffered += chunk;
    let end;
    while ((end = buffered.indexOf('\n')) >= 0) {
      const line = buffered.slice(0, end);
      buffered = buffered.slice(end + 1);
      if (!line.trim()) continue;
      let msg;
      try {
        msg = JSON.parse(line);
      } catch {
        continue;
      }
      if (msg.id !== undefined && pending.has(msg.id)) {
        const { resolve, reject } = pending.get(msg.id);
        pending.delete(msg.id);
        if (msg.error) reject(new Error(`${label}: ${JSON.stringify(msg.error)}`));
        else resolve(msg.result);
      } else if (msg.method) {
        notes.push(msg);
        for (const w of noteWaiters.splice(0)) w();
      }
    }
  });
  const failAll = (code, signal) => {
    for (const { reject } of pending.values()) reject(new Error(`${label} exited (${code ?? signal})`));
    pending.clear();
  };
  child.once('exit', failAll);
  const send = (msg) => child.stdin.write(`${JSON.stringify({ jsonrpc: '2.0', ...msg })}\n`);
  const request = (method, params, timeoutMs = 15_000) => {
    const id = nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        pending.delete(id);
        reject(new Error(`${label}: ${method} timed out`));
      }, timeoutMs);
      pending.set(id, {
        resolve: (v) => {
          clearTimeout(timer);
          resolve(v);
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      });
      send({ id, method, params });
    });
  };
  const notification = async (method, timeoutMs = 15_000) => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = notes.find((n) => n.method === method);
      if (found) return found;
      if (child.exitCode !== null) throw new Error(`${label} exited before ${method}`);
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`${label}: no ${method} within ${timeoutMs} ms`);
      await new Promise((r) => {
        const t = setTimeout(r, left);
        noteWaiters.push(() => {
          clearTimeout(t);
          r();
        });
      });
    }
  };
  return {
    /** initialize + notifications/initialized; resolves with the listening notification's params. */
    async start() {
      await request('initialize', { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'bench', version: '1' } });
      send({ method: 'notifications/initialized' });
      return (await notification('notifications/resource_plane/listening')).params;
    },
    /** tools/call; resolves with structuredContent, throws on an error result. */
    async call(name, args) {
      const result = await request('tools/call', { name, arguments: args });
      if (result.isError) throw new Error(`${label}: ${name} refused: ${result.content?.[0]?.text}`);
      return result.structuredContent;
    },
  };
}
