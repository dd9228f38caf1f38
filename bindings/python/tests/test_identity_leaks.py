"""No private key, no value of the identity variable and no user name in any Python exception.

Real keys made by ssh-keygen go, malformed or oddly pasted, through an
environment variable named by connection.identity into asp.open() against the
sshd fixture. No 16-byte window of any key of the test, nor of the variable's
value, may appear in str(), repr(), args or the formatted traceback of what is
raised. Values that are a valid key once normalised (CRLF, CR, surrounding
whitespace, indentation) must log in. A token-like user name that the server
rejects must not appear either. The trace is on (the "asp" logger at DEBUG)
and is held to the same rule.

    /usr/bin/python3 -m unittest discover -s bindings/python/tests -p 'test_identity_leaks.py' -v
"""

import logging
import os
import secrets
import string
import subprocess
import sys
import tempfile
import traceback
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shared import FixtureForModule, asp  # noqa: E402

VAR = "ASP_PY_IDENTITY_VALUE"
WINDOW = 16
FX = FixtureForModule()
setUpModule, tearDownModule = FX.start, FX.stop


def keygen(path, passphrase=""):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-C", "", "-f", path],
                   check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    with open(path, "rb") as f:
        return f.read()


def leaked(hay, secret):
    """The first 16-byte window of secret found in hay, or None."""
    for i in range(0, max(0, len(secret) - WINDOW + 1)):
        piece = secret[i:i + WINDOW]
        if piece in hay:
            return piece
    return None


def variants(key, locked, stranger, pub):
    """(name, value bytes, expected exception class or None for a login)."""
    lines = key.rstrip(b"\n").split(b"\n")
    body = lines[1:-1]
    noise = bytes(b or 0x78 for b in secrets.token_bytes(600))
    return [
        ("leading newline", b"\n" + key, None),
        ("CRLF line ends", key.replace(b"\n", b"\r\n"), None),
        ("CR line ends", key.replace(b"\n", b"\r"), None),
        ("leading and trailing spaces", b"   \t" + key + b"  \n \n", None),
        ("indented lines", b"    " + key.replace(b"\n", b"\n    "), None),
        ("PuTTY format", b"PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: \n"
         b"Public-Lines: 2\n" + b"\n".join(body) + b"\nPrivate-MAC: 0123456789abcdef\n", asp.ConfigError),
        ("base64 body only", b"\n".join(body) + b"\n", asp.ConfigError),
        ("base64 body on one line", b"".join(body), asp.ConfigError),
        ("truncated (no END line)", b"\n".join(lines[:4]) + b"\n", asp.ConfigError),
        ("truncated body", b"\n".join(lines[:3] + lines[-1:]) + b"\n", asp.AuthError),
        ("passphrase-protected, no passphrase", locked, asp.AuthError),
        ("binary garbage around the key", noise[:300] + key + noise[300:], asp.ConfigError),
        ("a huge value", key * 250, asp.ConfigError),
        ("BEGIN line missing", b"\n".join(lines[1:]) + b"\n", asp.ConfigError),
        ("END line missing", b"\n".join(lines[:-1]) + b"\n", asp.ConfigError),
        ("newlines written as \\n", key.replace(b"\n", b"\\n"), asp.ConfigError),
        ("the public key", pub, asp.ConfigError),
        ("a key the server does not know", stranger, asp.AuthError),
        ("only whitespace", b" \r\n\t \n", asp.ConfigError),
    ]


class TraceCapture(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())

    def text(self):
        return "\n".join(self.lines).encode("utf-8", "surrogateescape")


class IdentityLeaks(unittest.TestCase):
    def setUp(self):
        self.trace = TraceCapture()
        logger = logging.getLogger("asp")
        self.old_level = logger.level
        logger.addHandler(self.trace)
        logger.setLevel(logging.DEBUG)
        self.addCleanup(logger.removeHandler, self.trace)
        self.addCleanup(logger.setLevel, self.old_level)
        self.tmp = tempfile.mkdtemp(prefix="asp-py-identity.")
        self.kh = os.path.join(self.tmp, "known_hosts")
        os.environb.pop(VAR.encode(), None)
        os.environ.pop("SSH_AUTH_SOCK", None)
        os.environ.pop("ASP_IDENTITY_PASSPHRASE", None)

    def tearDown(self):
        os.environb.pop(VAR.encode(), None)
        subprocess.run(["rm", "-rf", self.tmp], check=False)

    def texts_of(self, exc):
        """Everything a harness might show of an exception, as bytes."""
        parts = [str(exc), repr(exc), repr(exc.args), getattr(exc, "message", ""),
                 "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))]
        return "\n".join(parts).encode("utf-8", "surrogateescape")

    def test_env_variants(self):
        with open(FX.client_key, "rb") as f:
            key = f.read()
        with open(FX.client_key + ".pub", "rb") as f:
            pub = f.read()
        locked_path = os.path.join(self.tmp, "locked_key")
        locked = keygen(locked_path, "correct horse")
        with open(locked_path + ".pub", "rb") as f, open(os.path.join(FX.dir, "authorized_keys"), "ab") as a:
            a.write(f.read())
        stranger = keygen(os.path.join(self.tmp, "stranger_key"))
        cfg = FX.write_config(os.path.join(self.tmp, "env.asp.json"), identity=VAR)
        cases = variants(key, locked, stranger, pub)
        self.assertGreaterEqual(len(cases), 12)
        for name, value, expected in cases:
            with self.subTest(variant=name):
                os.environb[VAR.encode()] = value
                if expected is None:
                    with asp.open(cfg, known_hosts=self.kh) as sb:
                        self.assertEqual(sb.info()["auth"], "publickey")
                        self.assertEqual(sb.exec("echo in").stdout, b"in\n")
                    continue
                self.trace.lines.clear()
                with self.assertRaises(expected) as cm:
                    asp.open(cfg, known_hosts=self.kh)
                if expected is asp.AuthError:  # a connect was tried: the trace has it
                    self.assertIn(b"connect to ", self.trace.text())
                text = self.texts_of(cm.exception) + b"\n" + self.trace.text()
                self.assertIn(VAR.encode(), text, "the message names the variable")
                for what, secret in (("a private key", key), ("a private key", locked),
                                     ("a private key", stranger), ("the variable's value", value)):
                    piece = leaked(text, secret)
                    self.assertIsNone(piece, f"{name}: the exception shows {what} ({piece!r}): {text!r}")

    def test_token_user_not_echoed(self):
        alphabet = string.ascii_letters + string.digits
        user = "tok_" + "".join(secrets.choice(alphabet) for _ in range(24))
        cfg = FX.write_config(os.path.join(self.tmp, "token.asp.json"), user=user)
        with self.assertRaises(asp.AuthError) as cm:
            asp.open(cfg, known_hosts=self.kh)
        self.assertIn(b"connect to ", self.trace.text())
        text = self.texts_of(cm.exception) + b"\n" + self.trace.text()
        self.assertIn(b"connection.user", text)
        self.assertIsNone(leaked(text, user.encode()), f"the exception shows the user name: {text!r}")
        self.assertTrue(FX.log_contains(user), "the server saw the user name offered")


if __name__ == "__main__":
    unittest.main()
