'use strict';
/*
 * The Node driver of the shared sshd fixture program (test/sshd-fixture.js
 * -> build/tests/sshd-fixture): extra sshd_config lines with a Match block,
 * the Subsystem override, and the server's life (kill9, startAgain,
 * rotateHostKey, stop), seen through /proc and a real libasp sandbox.
 */

const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const { describe, it } = require('node:test');

const asp = require('..');
const { startSshd } = require('./sshd-fixture.js');

function alive(pid) {
	try {
		const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
		return !'ZX'.includes(stat.slice(stat.lastIndexOf(')') + 2)[0]);
	} catch {
		return false;
	}
}

describe('sshd fixture driver', () => {
	it('puts extra lines first, Match blocks last, and replaces the sftp subsystem', async () => {
		const fx = await startSshd('MaxSessions 3\nMatch User nobody\n\tX11Forwarding yes',
			{ subsystem: 'sftp internal-sftp' });
		try {
			const lines = fs.readFileSync(fx.sshdConfig, 'utf8').split('\n').map((l) => l.trim())
				.filter((l) => l && !l.startsWith('#'));
			assert.ok(lines.indexOf('MaxSessions 3') < lines.indexOf('MaxSessions 10'), lines.join('\n'));
			assert.deepEqual(lines.slice(-2), ['Match User nobody', 'X11Forwarding yes']);
			assert.deepEqual(lines.filter((l) => l.startsWith('Subsystem')), ['Subsystem sftp internal-sftp']);
			const effective = execFileSync('/usr/sbin/sshd', ['-T', '-f', fx.sshdConfig], { encoding: 'utf8' })
				.split('\n');
			assert.ok(effective.includes('maxsessions 3'));
			assert.ok(effective.includes('subsystem sftp internal-sftp'));
			const sb = await asp.open({ config: fx.config });
			try {
				await sb.write('x.txt', 'through internal-sftp\n');
				assert.equal((await sb.read('x.txt')).toString(), 'through internal-sftp\n');
			} finally {
				await sb.close();
			}
		} finally {
			await fx.stop();
		}
	});

	it('kill9, startAgain, rotateHostKey and stop', async () => {
		const fx = await startSshd();
		const { dir, port } = fx;
		const fingerprint = fx.hostKeyFingerprint;
		let pid = fx.pid;
		try {
			assert.ok(alive(pid), 'sshd is alive before kill9');
			await fx.kill9();
			assert.equal(fx.pid, 0);
			assert.ok(!alive(pid));
			await assert.rejects(fx.kill9(), /not running/);
			await fx.startAgain();
			assert.equal(fx.port, port);
			assert.ok(alive(fx.pid));
			await fx.rotateHostKey();
			assert.notEqual(fx.hostKeyFingerprint, fingerprint);
			assert.match(fx.hostKeyFingerprint, /^SHA256:/);
			pid = fx.pid;
			assert.ok(alive(pid) && fs.existsSync(dir));
		} finally {
			await fx.stop();
		}
		assert.ok(!fs.existsSync(dir), 'stop removes the directory');
		assert.ok(!alive(pid), 'stop stops sshd');
	});
});
