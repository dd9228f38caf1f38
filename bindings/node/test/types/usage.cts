/* The declarations through `require` (package.json "exports" -> require -> index.d.ts). */
import asp = require('libasp');

export async function viaRequire(config: string): Promise<number | null> {
	const sb: asp.Sandbox = await asp.open({ config });
	try {
		const r: asp.ExecResult = await sb.exec('true');
		return r.exitCode;
	} finally {
		await sb.close();
	}
}
