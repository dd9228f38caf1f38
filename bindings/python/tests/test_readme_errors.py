"""The README's exception table names every error code the binding maps, with its class."""

import os
import re
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import asp  # noqa: E402
from asp import errors  # noqa: E402

README = os.path.join(HERE, os.pardir, "README.md")


class ReadmeExceptionTable(unittest.TestCase):
    def test_every_code_is_in_the_table(self):
        with open(README, encoding="utf-8") as f:
            rows = dict(re.findall(r"^\| `ASP_([A-Z]+)` \| `([A-Za-z]+)`", f.read(), re.M))
        self.assertTrue(rows, "no exception table found in the README")
        for code, cls in errors.EXCEPTIONS.items():
            with self.subTest(code=code.name):
                self.assertIn(code.name, rows, f"ASP_{code.name} is not in the README's exception table")
                self.assertEqual(rows[code.name], cls.__name__)
                self.assertIs(getattr(asp, cls.__name__), cls)
        self.assertEqual(set(rows), {c.name for c in errors.EXCEPTIONS})


if __name__ == "__main__":
    unittest.main()
