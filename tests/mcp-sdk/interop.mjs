// Interop test: the official MCP TypeScript SDK client (Client with
// StdioClientTransport) drives `sandbox mcp` and checks every result exactly.
//
//   node interop.mjs PATH/TO/sandbox [--backend local|namespace]
//
// Exits 0 when every check passed, 1 on the first mismatch (printed).
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const [cli, ...serverOptions] = process.argv.slice(2);
if (!cli) {
  console.error('usage: node interop.mjs PATH/TO/sandbox [OPTIONS OF sandbox mcp]');
  process.exit(2);
}
const backend = serverOptions.includes('namespace') ? 'namespace' : 'local';
const isolation = backend === 'namespace' ? 'process' : 'none';

const workspace = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'sandbox-mcp-sdk-')));
// What `pwd` prints for the sandbox root inside the boundary.
const root = backend === 'namespace' ? '/workspace' : workspace;
const args = ['mcp', '--backend', backend, '--workspace', workspace, ...serverOptions.filter(
  (option, i, all) => option !== '--backend' && all[i - 1] !== '--backend')];

const transport = new StdioClientTransport({ command: cli, args, stderr: 'pipe' });
let serverLog = '';
transport.stderr.on('data', (chunk) => { serverLog += chunk; });
const transportErrors = [];
const client = new Client({ name: 'sandbox-interop', version: '1.0.0' });
client.onerror = (error) => transportErrors.push(String(error));

let checks = 0;
function check(name, fn) {
  try {
    fn();
    checks++;
  } catch (error) {
    console.error(`FAIL ${name}\n${error.message}`);
    console.error(`server log:\n${serverLog}`);
    process.exit(1);
  }
}

// The section 7 object, with duration_ms checked for its type only.
function expectResult(result, { exit_code, stdout, stderr, timed_out = false, signal = null }) {
  assert.equal(result.isError, false);
  const structured = result.structuredContent;
  assert.deepEqual(Object.keys(structured), [
    'exit_code', 'stdout', 'stderr', 'duration_ms', 'timed_out', 'stdout_truncated',
    'stderr_truncated', 'signal', 'isolation', 'backend', 'stdout_dropped', 'stderr_dropped']);
  assert.equal(typeof structured.duration_ms, 'number');
  assert.ok(structured.duration_ms >= 0);
  assert.deepEqual({ ...structured, duration_ms: 0 }, {
    exit_code, stdout, stderr, duration_ms: 0, timed_out, stdout_truncated: false,
    stderr_truncated: false, signal, isolation, backend, stdout_dropped: 0, stderr_dropped: 0,
  });
}

function section(name, data) {
  if (data === '') return `${name}: (empty)\n`;
  return `${name}:\n${data}${data.endsWith('\n') ? '' : '\n'}`;
}

function text(result) {
  assert.equal(result.content.length, 1);
  assert.equal(result.content[0].type, 'text');
  return result.content[0].text;
}

const call = (name, args) => client.callTool({ name, arguments: args });

await client.connect(transport);
const child = transport._process;  // to read the server's exit status at the end
const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));

check('negotiated revision', () => {
  assert.deepEqual(client.getServerVersion(), { name: 'sandbox', version: client.getServerVersion().version });
  assert.deepEqual(client.getServerCapabilities(), { tools: { listChanged: false } });
});

// tools/list: the names and input schemas of the contract.
const { tools } = await client.listTools();
check('tools/list', () => {
  assert.deepEqual(tools.map((t) => t.name),
    ['run_command', 'read_file', 'write_file', 'append_file', 'list_dir', 'make_dir', 'remove']);
  const schemas = Object.fromEntries(tools.map((t) => [t.name, t.inputSchema]));
  const shape = (name) => ({
    properties: Object.keys(schemas[name].properties), required: schemas[name].required,
    type: schemas[name].type, additionalProperties: schemas[name].additionalProperties,
  });
  assert.deepEqual(shape('run_command'), { properties: ['command', 'timeout_ms', 'dir', 'session'], required: ['command'], type: 'object', additionalProperties: false });
  assert.deepEqual(shape('read_file'), { properties: ['path', 'max_bytes'], required: ['path'], type: 'object', additionalProperties: false });
  assert.deepEqual(shape('write_file'), { properties: ['path', 'content'], required: ['path', 'content'], type: 'object', additionalProperties: false });
  assert.deepEqual(shape('append_file'), { properties: ['path', 'content'], required: ['path', 'content'], type: 'object', additionalProperties: false });
  for (const name of ['list_dir', 'make_dir', 'remove'])
    assert.deepEqual(shape(name), { properties: ['path'], required: ['path'], type: 'object', additionalProperties: false });
  for (const tool of tools) assert.equal(tool.outputSchema.type, 'object', tool.name);
});

// run_command without a session.
{
  const result = await call('run_command', { command: 'echo out; echo err >&2; exit 3' });
  check('run_command exit 3', () => {
    expectResult(result, { exit_code: 3, stdout: 'out\n', stderr: 'err\n' });
    assert.equal(text(result), 'exit code: 3\nstdout:\nout\nstderr:\nerr\n');
  });
}
{
  const result = await call('run_command', { command: 'sleep 10', timeout_ms: 300 });
  check('run_command timeout', () => {
    expectResult(result, { exit_code: 137, stdout: '', stderr: '', timed_out: true, signal: 9 });
    assert.equal(text(result), 'exit code: 137\nstdout: (empty)\nstderr: (empty)\n' +
      'note: timed out after 300 ms; the command and everything it started were killed\n');
  });
}
{
  const result = await call('run_command', { command: "printf 'a\\377b'" });
  check('run_command non-UTF-8 output', () => {
    expectResult(result, { exit_code: 0, stdout: 'a\uFFFDb', stderr: '' });
    assert.equal(text(result), 'exit code: 0\nstdout:\na\uFFFDb\nstderr: (empty)\n' +
      'note: bytes that are not valid UTF-8 were replaced with U+FFFD\n');
  });
}

{
  // The largest output a call returns still fits the SDK's 10 MiB message limit.
  const result = await call('run_command', { command: 'head -c 5000000 /dev/zero; head -c 5000000 /dev/zero >&2' });
  check('run_command flood is truncated to what a client can take', () => {
    const s = result.structuredContent;
    assert.deepEqual([s.stdout.length, s.stdout_truncated, s.stdout_dropped, s.stderr.length, s.stderr_dropped],
      [131072, true, 5000000 - 131072, 131072, 5000000 - 131072]);
    assert.ok(text(result).endsWith(`note: stdout truncated: ${5000000 - 131072} bytes dropped from the middle\n` +
      `note: stderr truncated: ${5000000 - 131072} bytes dropped from the middle\n`));
  });
}

// make_dir, write_file, append_file, read_file, list_dir.
{
  const made = await call('make_dir', { path: 'sub/deeper' });
  check('make_dir', () => {
    assert.deepEqual(made, { content: [{ type: 'text', text: 'created directory sub/deeper' }], structuredContent: { path: 'sub/deeper' }, isError: false });
    assert.ok(fs.statSync(path.join(workspace, 'sub/deeper')).isDirectory());
  });
  const written = await call('write_file', { path: 'sub/notes.txt', content: 'hello\n' });
  check('write_file', () => {
    assert.deepEqual(written, { content: [{ type: 'text', text: 'wrote 6 bytes to sub/notes.txt' }], structuredContent: { path: 'sub/notes.txt', bytes: 6 }, isError: false });
  });
  const appended = await call('append_file', { path: 'sub/notes.txt', content: 'world\n' });
  check('append_file', () => {
    assert.deepEqual(appended, { content: [{ type: 'text', text: 'appended 6 bytes to sub/notes.txt' }], structuredContent: { path: 'sub/notes.txt', bytes: 6 }, isError: false });
    assert.equal(fs.readFileSync(path.join(workspace, 'sub/notes.txt'), 'utf8'), 'hello\nworld\n');
  });
  const read = await call('read_file', { path: 'sub/notes.txt' });
  check('read_file', () => {
    assert.deepEqual(read, { content: [{ type: 'text', text: 'hello\nworld\n' }], structuredContent: { path: 'sub/notes.txt', content: 'hello\nworld\n', bytes: 12, truncated: false, valid_utf8: true }, isError: false });
  });
  const limited = await call('read_file', { path: 'sub/notes.txt', max_bytes: 5 });
  check('read_file max_bytes', () => {
    assert.deepEqual(limited.structuredContent, { path: 'sub/notes.txt', content: 'hello', bytes: 5, truncated: true, valid_utf8: true });
    assert.equal(text(limited), 'hello\n[truncated: the file is longer than 5 bytes; pass a larger max_bytes (at most 524288)]');
  });
  const listed = await call('list_dir', { path: 'sub' });
  check('list_dir', () => {
    assert.deepEqual(listed, { content: [{ type: 'text', text: 'deeper/\nnotes.txt\n' }], structuredContent: { path: 'sub', entries: [{ name: 'deeper', is_dir: true }, { name: 'notes.txt', is_dir: false }] }, isError: false });
  });
}

// A session keeps cd and export across calls; a fresh command does not.
{
  const first = await call('run_command', { command: 'cd sub && export GREETING=hi', session: 'work' });
  check('session: cd and export', () => expectResult(first, { exit_code: 0, stdout: '', stderr: '' }));
  const second = await call('run_command', { command: 'pwd; echo "$GREETING"; cat notes.txt', session: 'work' });
  check('session: state kept', () => expectResult(second, { exit_code: 0, stdout: `${root}/sub\nhi\nhello\nworld\n`, stderr: '' }));
  const other = await call('run_command', { command: 'pwd; echo "[$GREETING]"', session: 'other' });
  check('session: another session is separate', () => expectResult(other, { exit_code: 0, stdout: `${root}\n[]\n`, stderr: '' }));
  const plain = await call('run_command', { command: 'pwd; echo "[$GREETING]"' });
  check('no session: fresh shell', () => expectResult(plain, { exit_code: 0, stdout: `${root}\n[]\n`, stderr: '' }));
  const inDir = await call('run_command', { command: 'pwd', dir: 'sub/deeper' });
  check('run_command dir', () => expectResult(inDir, { exit_code: 0, stdout: `${root}/sub/deeper\n`, stderr: '' }));
}

// remove: one file, then refusal of a non-empty directory.
{
  const removed = await call('remove', { path: 'sub/notes.txt' });
  check('remove', () => {
    assert.deepEqual(removed, { content: [{ type: 'text', text: 'removed sub/notes.txt' }], structuredContent: { path: 'sub/notes.txt' }, isError: false });
    assert.equal(fs.existsSync(path.join(workspace, 'sub/notes.txt')), false);
  });
  const notEmpty = await call('remove', { path: 'sub' });
  check('remove non-empty directory is an error result', () => {
    assert.equal(notEmpty.isError, true);
    assert.match(text(notEmpty), /^error: not_empty: /);
  });
}

// Path escapes come back as isError results, never honoured.
for (const [tool, args] of [
  ['read_file', { path: '../../../etc/passwd' }],
  ['write_file', { path: '../escaped.txt', content: 'x' }],
  ['list_dir', { path: '..' }],
  ['read_file', { path: '/etc/passwd' }],
]) {
  const result = await call(tool, args);
  check(`path escape ${tool} ${args.path}`, () => {
    assert.equal(result.isError, true);
    assert.equal(result.structuredContent, undefined);
    assert.match(text(result), /^error: escapes_root: /);
  });
}
check('nothing written outside', () => assert.equal(fs.existsSync(path.join(path.dirname(workspace), 'escaped.txt')), false));

// Protocol errors surface as McpError with the JSON-RPC code.
for (const [name, args, code] of [
  ['no_such_tool', {}, -32602],
  ['run_command', { command: 42 }, -32602],
  ['run_command', {}, -32602],
  ['read_file', { path: 'x', extra: true }, -32602],
]) {
  let caught = null;
  try {
    await call(name, args);
  } catch (error) {
    caught = error;
  }
  check(`protocol error ${name} ${JSON.stringify(args)}`, () => {
    assert.ok(caught instanceof McpError, `expected McpError, got ${caught}`);
    assert.equal(caught.code, code);
  });
}

await client.ping();
await client.close();
const status = await exited;
check('server exits 0 when stdin closes', () => {
  assert.deepEqual(status, { code: 0, signal: null });
  assert.match(serverLog, /stdin closed; sandbox closed/);
});
check('stdout carried protocol messages only', () => assert.deepEqual(transportErrors, []));
fs.rmSync(workspace, { recursive: true, force: true });
console.log(`mcp-sdk interop (${backend}): ${checks} checks passed`);
