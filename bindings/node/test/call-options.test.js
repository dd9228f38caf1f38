'use strict';
/*
 * AbortSignal and timeout on the file calls, against a real sshd. A call is
 * made to hang for real: the SFTP server opens a FIFO in the workspace for
 * reading and blocks until a writer comes.
 */

const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const { beforeEach, afterEach, describe, it } = require('node:test');

const asp = require('..');
const { sandboxPerFile } = require('./sshd-fixture.js');

let fx;
let sb;
let dir;
let fifo;

sandboxPerFile((f, s) => {
	fx = f;
	sb = s;
});

beforeEach(async () => {
	dir = `co-${crypto.randomBytes(6).toString('hex')}`;
	fifo = `${dir}/fifo`;
	await sb.mkdir(dir);
	const r = await sb.exec(`mkfifo ${fifo}`);
	assert.equal(r.exitCode, 0, r.stderr.toString());
});

afterEach(async () => {
	/* Release the SFTP server still blocked opening the FIFO: give it a writer. */
	await sb.exec(`exec 3<>${fifo}; exec 3>&-`, { timeout: 5000 });
	await sb.remove(dir, { recursive: true });
});

describe('file calls take { signal, timeout }', () => {
	it('a timeout ends a read that would hang forever', async () => {
		await assert.rejects(sb.read(fifo, { timeout: 500 }), (e) => {
			assert.equal(e.code, 'ASP_ETIMEOUT');
			assert.match(e.message, /deadline/);
			return true;
		});
		/* The handle still works. */
		await sb.write(`${dir}/after`, 'ok');
		assert.equal((await sb.read(`${dir}/after`)).toString(), 'ok');
	});

	it('opTimeout is the default deadline', async () => {
		const quick = await asp.open({ config: fx.config, opTimeout: 500 });
		try {
			await assert.rejects(quick.read(fifo), { code: 'ASP_ETIMEOUT' });
		} finally {
			await quick.close();
		}
	});

	it('an AbortSignal stops a hanging read', async () => {
		const ac = new AbortController();
		setTimeout(() => ac.abort(), 300);
		await assert.rejects(sb.read(fifo, { signal: ac.signal, timeout: 60000 }),
			{ code: 'ASP_ECANCELLED' });
		const st = await sb.stat(fifo);
		assert.equal(st.type, 'other');
	});

	it('an aborted signal stops every file call before it starts', async () => {
		const signal = AbortSignal.abort();
		const calls = [
			() => sb.read(`${dir}/x`, { signal }),
			() => sb.write(`${dir}/x`, 'data', { signal }),
			() => sb.stat(dir, { signal }),
			() => sb.list(dir, { signal }),
			() => sb.mkdir(`${dir}/sub`, { signal }),
			() => sb.remove(`${dir}/x`, { signal }),
			() => sb.rename(`${dir}/x`, `${dir}/y`, { signal }),
		];
		for (const call of calls)
			await assert.rejects(call(), { code: 'ASP_ECANCELLED' });
		assert.deepEqual((await sb.list(dir)).map((e) => e.name), ['fifo']);
	});

	it('bad options are rejected', async () => {
		await assert.rejects(sb.stat(dir, { signal: 'no' }), TypeError);
		await assert.rejects(sb.stat(dir, { timeout: -1 }), RangeError);
	});
});
