'use strict';
/*
 * No private key, no value of the identity variable and no user name in any
 * error the binding raises. Real keys made by ssh-keygen go, malformed or
 * oddly pasted, through the environment variable named by
 * connection.identity into asp.open() against the sshd fixture; no 16-byte
 * window of any key of the test, nor of the variable's value, may appear in
 * the error's message, stack, or its util.inspect() form. Values that are a
 * valid key once normalised (CRLF, CR, surrounding whitespace, indentation)
 * must log in. A token-like user name the server rejects must not appear.
 */

const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');
const util = require('node:util');
const { after, before, describe, it } = require('node:test');

const asp = require('..');
const { startSshd } = require('./sshd-fixture.js');

const VAR = 'ASP_NODE_IDENTITY_VALUE';
const WINDOW = 16;
let fx;
let tmp;

before(async () => {
	fx = await startSshd();
	tmp = fs.mkdtempSync('/tmp/asp-node-identity.');
});

after(async () => {
	delete process.env[VAR];
	if (fx)
		await fx.stop();
	if (tmp)
		fs.rmSync(tmp, { recursive: true, force: true });
});

function keygen(file, passphrase = '') {
	execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', passphrase, '-C', '', '-f', file],
		{ stdio: ['ignore', 'ignore', 'inherit'] });
	return fs.readFileSync(file, 'latin1');
}

/* The first 16-byte window of `secret` (a Buffer) found in `hay` (a Buffer), or null. */
function leaked(hay, secret) {
	for (let i = 0; i + WINDOW <= secret.length; i++) {
		const piece = secret.subarray(i, i + WINDOW);
		if (hay.indexOf(piece) >= 0)
			return piece.toString('latin1');
	}
	return null;
}

/* Everything a harness might show of an error. */
function textOf(e) {
	return Buffer.from([String(e), e.message, e.stack, util.inspect(e), JSON.stringify(e)].join('\n'), 'utf8');
}

function variants(key, locked, stranger, pub) {
	const lines = key.replace(/\n$/, '').split('\n');
	const body = lines.slice(1, -1);
	const noise = Array.from(crypto.randomBytes(600), (b) => String.fromCharCode(b || 0x78)).join('');
	return [
		['leading newline', `\n${key}`, 'ASP_OK'],
		['CRLF line ends', key.replace(/\n/g, '\r\n'), 'ASP_OK'],
		['CR line ends', key.replace(/\n/g, '\r'), 'ASP_OK'],
		['leading and trailing spaces', `   \t${key}  \n \n`, 'ASP_OK'],
		['indented lines', `    ${key.replace(/\n/g, '\n    ')}`, 'ASP_OK'],
		['PuTTY format', `PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: \nPublic-Lines: 2\n${body.join('\n')}\nPrivate-MAC: 0123456789abcdef\n`, 'ASP_ECONFIG'],
		['base64 body only', `${body.join('\n')}\n`, 'ASP_ECONFIG'],
		['base64 body on one line', body.join(''), 'ASP_ECONFIG'],
		['truncated (no END line)', `${lines.slice(0, 4).join('\n')}\n`, 'ASP_ECONFIG'],
		['truncated body', `${lines.slice(0, 3).concat(lines.slice(-1)).join('\n')}\n`, 'ASP_EAUTH'],
		['passphrase-protected, no passphrase', locked, 'ASP_EAUTH'],
		['binary garbage around the key', noise.slice(0, 300) + key + noise.slice(300), 'ASP_ECONFIG'],
		['a huge value', key.repeat(250), 'ASP_ECONFIG'],
		['BEGIN line missing', `${lines.slice(1).join('\n')}\n`, 'ASP_ECONFIG'],
		['END line missing', `${lines.slice(0, -1).join('\n')}\n`, 'ASP_ECONFIG'],
		['newlines written as \\n', key.replace(/\n/g, '\\n'), 'ASP_ECONFIG'],
		['the public key', pub, 'ASP_ECONFIG'],
		['a key the server does not know', stranger, 'ASP_EAUTH'],
		['only whitespace', ' \r\n\t \n', 'ASP_ECONFIG'],
	];
}

describe('identity values never reach an error', () => {
	it('malformed and oddly pasted keys in the variable', async () => {
		const key = fs.readFileSync(fx.clientKey, 'latin1');
		const pub = fs.readFileSync(`${fx.clientKey}.pub`, 'latin1');
		const lockedPath = path.join(tmp, 'locked_key');
		const locked = keygen(lockedPath, 'correct horse');
		fs.appendFileSync(path.join(fx.dir, 'authorized_keys'), fs.readFileSync(`${lockedPath}.pub`));
		const stranger = keygen(path.join(tmp, 'stranger_key'));
		const cfg = fx.writeConfig(path.join(tmp, 'env.asp.json'), { connection: { identity: VAR } });
		const cases = variants(key, locked, stranger, pub);
		assert.ok(cases.length >= 12);
		for (const [name, value, expected] of cases) {
			process.env[VAR] = value;
			/* What the library sees: the variable's bytes (UTF-8 of the string). */
			const valueBytes = Buffer.from(process.env[VAR], 'utf8');
			if (expected === 'ASP_OK') {
				const sb = await asp.open({ config: cfg });
				try {
					assert.equal((await sb.info()).auth, 'publickey', name);
					const r = await sb.exec('echo in');
					assert.equal(Buffer.from(r.stdout).toString(), 'in\n', name);
				} finally {
					await sb.close();
				}
				continue;
			}
			let err = null;
			try {
				const sb = await asp.open({ config: cfg });
				await sb.close();
			} catch (e) {
				err = e;
			}
			assert.ok(err, `${name}: asp.open succeeded`);
			assert.equal(err.code, expected, `${name}: ${err.message}`);
			const text = textOf(err);
			assert.ok(text.includes(VAR), `${name}: the error does not name ${VAR}: ${err.message}`);
			for (const [what, secret] of [['a private key', Buffer.from(key, 'latin1')],
				['a private key', Buffer.from(locked, 'latin1')],
				['a private key', Buffer.from(stranger, 'latin1')],
				["the variable's value", valueBytes]]) {
				const piece = leaked(text, secret);
				assert.equal(piece, null, `${name}: the error shows ${what} (${JSON.stringify(piece)}): ${err.message}`);
			}
		}
		delete process.env[VAR];
	});

	it('a token-like user name the server rejects', async () => {
		const alphabet = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789';
		const user = `tok_${Array.from(crypto.randomBytes(24), (b) => alphabet[b % alphabet.length]).join('')}`;
		const cfg = fx.writeConfig(path.join(tmp, 'token.asp.json'), { connection: { user } });
		let err = null;
		try {
			const sb = await asp.open({ config: cfg });
			await sb.close();
		} catch (e) {
			err = e;
		}
		assert.ok(err, 'asp.open succeeded');
		assert.equal(err.code, 'ASP_EAUTH', err.message);
		const text = textOf(err);
		assert.ok(text.includes('connection.user'), err.message);
		assert.equal(leaked(text, Buffer.from(user)), null, `the error shows the user name: ${err.message}`);
		assert.ok(fx.logContains(user), 'the server saw the user name offered');
	});
});
