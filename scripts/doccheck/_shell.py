"""Split shell text into simple commands: words with the Markdown line each starts on.

Not a shell, only enough of bash's grammar to find every command's words: quoting (`'…'`,
`"…"`, `$'…'`, `\\x`), `\\`-newline continuations, `#` comments, the control operators
(`&&`, `||`, `;`, `|`, `&`, `(`, `)`), redirections (dropped with their target), here-documents
(their bodies are data) and `$(…)`, `` `…` ``, `<(…)` (their commands are split too). Expansions
are kept as written and the word is marked dynamic: their values exist only at run time.

Documentation text is not always valid shell, so two readings differ from bash: a placeholder
such as `<the node's flags>` is one word (bash would read a redirection and an open quote), and a
quote still open at the end of the text closes at the end of its line instead of swallowing it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Op", "Word", "lex", "split_commands"]

# Longest first, so that `&&` is not read as two `&`.
CONTROL = ("&&", "||", ";;", "|&", ";", "|", "&", "(", ")", "\n")
REDIRECT = ("&>>", "&>", "<<<", "<<-", "<<", "<>", "<&", ">>", ">&", ">|", "<", ">")
_OPERATORS = sorted(CONTROL + REDIRECT, key=len, reverse=True)
_META = frozenset(" \t\n;&|()<>")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=")
_PARAMETER = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-])")
# `<the node's flags>`: a placeholder the reader replaces, not a redirection (and its apostrophe
# opens no quote). A redirection `<in >out` has a space before its `>`.
_PLACEHOLDER = re.compile(r"<[A-Za-z][\w' .,/-]*(?<! )>")


@dataclass(frozen=True)
class Word:
    """One shell word.

    Attributes:
        text: the word with quotes removed and expansions (`$X`, `$(…)`) kept as written.
        line: the Markdown line the word starts on.
        dynamic: it holds an expansion outside single quotes, so its value is unknown here.
        assignment: it reads `NAME=value`: a variable assignment when it precedes the command.
    """

    text: str
    line: int
    dynamic: bool = False
    assignment: bool = False


@dataclass(frozen=True)
class Op:
    """A control operator (`&&`, `;`, newline, …) or a redirection operator (`>`, `2>&1`'s `>&`)."""

    text: str
    line: int


def _matching(text: str, i: int, open_: str, close: str) -> int:
    """Index of the `close` that ends the group whose body starts at `i` (len(text) if none)."""
    depth, n = 1, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c in "'\"":
            end = text.find(c, i + 1)
            i = n if end < 0 else end + 1
            continue
        if c == open_:
            depth += 1
        elif c == close:
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return n


def _line_end(text: str, i: int) -> int:
    end = text.find("\n", i)
    return len(text) if end < 0 else end


class _Lexer:
    """One pass over `text`; `tokens` gets its words and operators, `nested` its `$(…)` bodies."""

    def __init__(self, text: str, first_line: int) -> None:
        self.text, self.i, self.line = text, 0, first_line
        self.tokens: list[Word | Op] = []
        self.nested: list[list[Word | Op]] = []
        self.heredocs: list[tuple[str, bool]] = []  # (delimiter, strip leading tabs) per `<<`
        self._reset()

    def _reset(self) -> None:
        self.buf: list[str] = []
        self.started = self.dynamic = False
        self.word_line, self.word_start = self.line, self.i

    def _start(self) -> None:
        if not self.started:
            self.started, self.word_line, self.word_start = True, self.line, self.i

    def _end_word(self) -> None:
        if self.started:
            raw = self.text[self.word_start : self.i]
            word = Word(
                "".join(self.buf), self.word_line, self.dynamic, bool(_ASSIGNMENT.match(raw))
            )
            last = self.tokens[-1] if self.tokens else None
            if isinstance(last, Op) and last.text in ("<<", "<<-"):
                self.heredocs.append((word.text, last.text == "<<-"))
            self.tokens.append(word)
        self._reset()

    def _take(self, end: int, *, closed: bool) -> str:
        """Consume text[i:end] (plus the closing character when `closed`), counting lines."""
        chunk = self.text[self.i : end]
        self.line += chunk.count("\n")
        self.i = end + 1 if closed else end
        return chunk

    def _substitution(self, body_start: int, close_at: int) -> None:
        """A `$(…)`, `` `…` `` or `<(…)`: its commands are split as their own text."""
        inner = _Lexer(self.text[body_start:close_at], self.line)
        inner.run()
        self.nested.append(inner.tokens)
        self.nested.extend(inner.nested)

    def _dollar(self) -> None:
        text, i, n = self.text, self.i, len(self.text)
        nxt = text[i + 1 : i + 3]
        self._start()
        if nxt.startswith("'"):  # $'…': ANSI-C quoting, a literal
            j = i + 2
            while j < n and text[j] != "'":
                j += 2 if text[j] == "\\" else 1
            closed = j < n
            self.i = i + 2
            self.buf.append(self._take(j if closed else _line_end(text, i + 2), closed=closed))
            return
        if nxt == "((":  # arithmetic: two closing parentheses
            end = _matching(text, i + 3, "(", ")") + 1
        elif nxt.startswith("("):
            end = _matching(text, i + 2, "(", ")")
            self._substitution(i + 2, end)
        elif nxt.startswith("{"):
            end = _matching(text, i + 2, "{", "}")
        elif m := _PARAMETER.match(text, i):
            end = m.end() - 1
        else:  # a lone `$` is a literal
            self.buf.append(self._take(i + 1, closed=False))
            return
        self.dynamic = True
        self.buf.append(self._take(min(end + 1, n), closed=False))

    def _double_quoted(self) -> None:
        text, n = self.text, len(self.text)
        self._start()
        self._take(self.i + 1, closed=False)  # the opening quote
        while self.i < n and text[self.i] != '"':
            c = text[self.i]
            if c == "\n" and text.find('"', self.i) < 0:
                return  # never closed: it ends with its line (a placeholder's apostrophe)
            if c == "\\" and text[self.i + 1 : self.i + 2] in ('"', "\\", "$", "`", "\n"):
                escaped = text[self.i + 1]
                self._take(self.i + 2, closed=False)
                if escaped != "\n":
                    self.buf.append(escaped)
            elif c == "$":
                self._dollar()
            elif c == "`":
                self._backtick()
            else:
                self.buf.append(self._take(self.i + 1, closed=False))
        self.i += 1  # the closing quote

    def _backtick(self) -> None:
        self._start()
        self.dynamic = True
        end = self.i + 1
        while end < len(self.text) and self.text[end] != "`":
            end += 2 if self.text[end] == "\\" else 1
        self._substitution(self.i + 1, min(end, len(self.text)))
        self.buf.append(self._take(min(end + 1, len(self.text)), closed=False))

    def _skip_heredocs(self) -> None:
        """After a newline, the bodies of the here-documents opened on the line just ended."""
        for delimiter, strip_tabs in self.heredocs:
            while self.i < len(self.text):
                end = _line_end(self.text, self.i)
                body = self.text[self.i : end]
                self._take(min(end + 1, len(self.text)), closed=False)  # the body line and its \n
                if (body.lstrip("\t") if strip_tabs else body) == delimiter:
                    break
        self.heredocs.clear()

    def run(self) -> None:
        text, n = self.text, len(self.text)
        while self.i < n:
            c = text[self.i]
            if c == "\\":
                if text[self.i + 1 : self.i + 2] == "\n":  # continuation: the two characters vanish
                    self._take(self.i + 2, closed=False)
                    continue
                self._start()
                self._take(self.i + 1, closed=False)
                self.buf.append(self._take(min(self.i + 1, n), closed=False) or "\\")
            elif c in " \t":
                self._end_word()
                self.i += 1
            elif c == "#" and not self.started:
                self.i = _line_end(text, self.i)
            elif c == "<" and not self.started and (m := _PLACEHOLDER.match(text, self.i)):
                self._start()
                self.buf.append(self._take(m.end(), closed=False))
            elif c == "'":
                self._start()
                end = text.find("'", self.i + 1)
                closed = end >= 0
                end = end if closed else _line_end(text, self.i)
                self.i += 1
                self.buf.append(self._take(end, closed=closed))
            elif c == '"':
                self._double_quoted()
            elif c == "$":
                self._dollar()
            elif c == "`":
                self._backtick()
            elif c in "<>" and text[self.i + 1 : self.i + 2] == "(":  # process substitution
                self._start()
                self.dynamic = True
                end = _matching(text, self.i + 2, "(", ")")
                self._substitution(self.i + 2, end)
                self.buf.append(self._take(min(end + 1, n), closed=False))
            elif c in _META:
                if c in "<>" and self.started and "".join(self.buf).isdigit():
                    self._reset()  # `2>`: the digits name a file descriptor, not a word
                self._end_word()
                op = next(o for o in _OPERATORS if text.startswith(o, self.i))
                self.tokens.append(Op(op, self.line))
                self._take(self.i + len(op), closed=False)
                if op == "\n":
                    self._skip_heredocs()
                self._reset()
            else:
                self._start()
                self.buf.append(c)
                self.i += 1
        self._end_word()


def lex(text: str, first_line: int = 1) -> list[list[Word | Op]]:
    """Tokens of `text`, then the tokens of each command substitution in it.

    Args:
        text: shell source; its line 1 is Markdown line `first_line`.
    """
    lexer = _Lexer(text, first_line)
    lexer.run()
    return [lexer.tokens, *lexer.nested]


def split_commands(tokens: list[Word | Op]) -> tuple[list[list[Word]], set[str]]:
    """The simple commands in `tokens` (redirections dropped) and the functions they define.

    `name() { …; }` and `function name { …; }` define `name`: the body's commands are returned
    like any others, and a later command naming `name` runs the function, not an executable.
    """
    commands: list[list[Word]] = []
    functions: set[str] = set()
    current: list[Word] = []
    skip_target = False
    for k, tok in enumerate(tokens):
        if isinstance(tok, Word):
            if skip_target:
                skip_target = False
            elif current and current[0].text == "function" and len(current) == 1:
                functions.add(tok.text)  # `function name`: neither word runs anything
                current = []
            else:
                current.append(tok)
            continue
        if tok.text in REDIRECT:
            skip_target = True
            continue
        after = tokens[k + 1] if k + 1 < len(tokens) else None
        if tok.text == "(" and not current and isinstance(after, Op) and after.text == ")":
            continue  # `function name () {`: the name is recorded already
        if tok.text == "(" and len(current) == 1 and isinstance(after, Op) and after.text == ")":
            functions.add(current[0].text)
            current = []
            continue
        if current:
            commands.append(current)
        current = []
    if current:
        commands.append(current)
    return commands, functions
