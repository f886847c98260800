import unittest

from textstats import line_count, word_count


class WordCountTest(unittest.TestCase):
    def test_simple(self):
        self.assertEqual(word_count("one two three"), 3)

    def test_runs_of_whitespace(self):
        self.assertEqual(word_count("  hello   world\n"), 2)

    def test_empty(self):
        self.assertEqual(word_count(""), 0)


class LineCountTest(unittest.TestCase):
    def test_lines(self):
        self.assertEqual(line_count("a\nb\n"), 2)


if __name__ == "__main__":
    unittest.main()
