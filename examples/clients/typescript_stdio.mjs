// The approval gate from the MCP TypeScript SDK (v2, @modelcontextprotocol/client), over stdio:
// the SDK launches `approval-server stdio --connect URL`, which bridges to the running gate.
import { Client } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';

const url = process.argv[2] ?? 'http://127.0.0.1:4800/mcp';
const gate = new Client({ name: 'example-agent', version: '1.0.0' });
await gate.connect(new StdioClientTransport({ command: 'approval-server', args: ['stdio', '--connect', url] }));

const { tools } = await gate.listTools();
console.log('tools:', tools.map((t) => t.name).join(', '));
const prepared = await gate.callTool({
  name: 'approval_prepare',
  arguments: { kind: 'note.write', payload: { text: 'Hello from TypeScript over stdio' }, summary: 'Write a greeting' },
});
const { code, proposal_id } = prepared.structuredContent;
console.log('prepare:', code, proposal_id);
const status = await gate.callTool({ name: 'approval_status', arguments: { proposal_id } });
console.log('status:', status.structuredContent.code, status.structuredContent.status);
await gate.close();
