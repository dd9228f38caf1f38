'use strict';
/*
 * fileTransport: 'exec': file calls over shell commands, against a real
 * sshd. A sandbox forced to 'exec' reads, writes and lists without ever
 * asking for the SFTP subsystem (sshd's log says so), and info() reports
 * it; under 'auto', a server with no SFTP subsystem falls back to the same.
 */

const assert = require('node:assert/strict');
const { describe, it } = require('node:test');

const asp = require('..');
const { startSshd } = require('./sshd-fixture.js');

const ALL_BYTES = Buffer.from(Array.from({ length: 768 }, (_, i) => i % 256));

async function calls(sb, d) {
	await sb.write(`${d}/sub/bytes.bin`, ALL_BYTES, { parents: true });
	assert.deepEqual(await sb.read(`${d}/sub/bytes.bin`), ALL_BYTES);
	assert.deepEqual(await sb.read(`${d}/sub/bytes.bin`, { offset: 255, limit: 3 }), ALL_BYTES.subarray(255, 258));
	await sb.write(`${d}/sub/it's $(x).txt`, 'text');
	const names = (await sb.list(`${d}/sub`)).map((e) => e.name).sort();
	assert.deepEqual(names, ['bytes.bin', "it's $(x).txt"]);
	assert.equal((await sb.stat(`${d}/sub/bytes.bin`)).size, ALL_BYTES.length);
	await assert.rejects(sb.read(`${d}/nope`), (e) => e.code === 'ASP_ENOENT');
}

describe('fileTransport', () => {
	it("'exec' never opens SFTP and says so in info()", async () => {
		const fx = await startSshd();
		try {
			const sb = await asp.open({ config: fx.config, fileTransport: 'exec' });
			try {
				assert.equal((await sb.info()).fileTransport, 'exec');
				await calls(sb, 'forced');
				assert.equal((await sb.info()).fileTransport, 'exec');
			} finally {
				await sb.close();
			}
			assert.ok(fx.logContains('Accepted publickey'));
			assert.ok(!fx.logContains("subsystem 'sftp'"), 'forced exec asked for the sftp subsystem');
			/* The same calls under auto do ask for SFTP: the log check can fail. */
			const auto = await asp.open({ config: fx.config });
			try {
				await calls(auto, 'auto');
				assert.equal((await auto.info()).fileTransport, 'sftp');
			} finally {
				await auto.close();
			}
			assert.ok(fx.logContains("subsystem 'sftp'"));
		} finally {
			await fx.stop();
		}
	});

	it('maxListBytes caps the bytes of names in one listing', async () => {
		const fx = await startSshd();
		try {
			for (const fileTransport of ['sftp', 'exec']) {
				const ok = await asp.open({ config: fx.config, fileTransport, maxListBytes: 5 });
				try {
					await ok.write(`lb-${fileTransport}/abc`, '', { parents: true });
					await ok.write(`lb-${fileTransport}/de`, '');
					assert.deepEqual((await ok.list(`lb-${fileTransport}`)).map((e) => e.name).sort(), ['abc', 'de']);
				} finally {
					await ok.close();
				}
				const low = await asp.open({ config: fx.config, fileTransport, maxListBytes: 4n });
				try {
					await assert.rejects(low.list(`lb-${fileTransport}`),
						(e) => e.code === 'ASP_ELIMIT' && /maxListBytes/.test(e.message));
				} finally {
					await low.close();
				}
			}
		} finally {
			await fx.stop();
		}
	});

	it("'auto' falls back to exec on a server without SFTP; 'sftp' says why", async () => {
		const fx = await startSshd('# Subsystem: none on this server\n');
		try {
			const sb = await asp.open({ config: fx.config });
			try {
				assert.equal((await sb.info()).fileTransport, null);
				await calls(sb, 'auto');
				assert.equal((await sb.info()).fileTransport, 'exec');
			} finally {
				await sb.close();
			}
			const strict = await asp.open({ config: fx.config, fileTransport: 'sftp' });
			try {
				await assert.rejects(strict.read('anything'), (e) => {
					assert.equal(e.code, 'ASP_EPROTO');
					assert.match(e.message, /no SFTP subsystem/);
					assert.match(e.message, /file_transport/);
					return true;
				});
			} finally {
				await strict.close();
			}
		} finally {
			await fx.stop();
		}
	});
});
