/*
 * Wrong uses of the declarations. test/types.test.js compiles this file and
 * requires tsc to fail with exactly the error marked on each line
 * (`// expect TSnnnn`), no more and no fewer: declarations loose enough to
 * accept one of these lines fail the test.
 */
import { AspError, Sandbox, open } from 'libasp';
import type { ExecResult, SandboxInfo } from 'libasp';

await open({ maxConnections: '4' }); // expect TS2322
await open({ fileTransport: 'ftp' }); // expect TS2820
await open({ lazyy: true }); // expect TS2561
await open({ maxReadBytes: 'all' }); // expect TS2322
const sb = await open();
await sb.exec('true', { timeout: '5' }); // expect TS2322
await sb.exec('true', { onData: (stream: number) => stream }); // expect TS2322
await sb.exec(['ls', '-l']); // expect TS2345
await sb.read(42); // expect TS2345
await sb.write('f', 42); // expect TS2345
await sb.remove('d', { recursive: 'yes' }); // expect TS2322
const r: ExecResult = await sb.exec('true');
const out: string = r.stdout; // expect TS2322
r.exitCode.toFixed(); // expect TS18047
const info: SandboxInfo = await sb.info();
const t: 'sftp' | 'exec' = info.fileTransport; // expect TS2322
new Sandbox(); // expect TS2673
sb.workspace = '/'; // expect TS2540
const e = new AspError('ENOENT'); // expect TS2345
export { out, t, e };
