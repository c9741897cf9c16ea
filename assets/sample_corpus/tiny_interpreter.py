"""A tiny calculator language: numbers, variables, + - * / and parentheses.

    >>> run("x = 2 + 3 * 4; y = (x - 4) / 2; y")
    5.0
"""

from dataclasses import dataclass


@dataclass
class Token:
    kind: str
    text: str


def tokenize(source: str) -> list[Token]:
    """Split source text into numbers, names and single-character symbols."""
    tokens = []
    i = 0
    while i < len(source):
        ch = source[i]
        if ch.isspace():
            i += 1
        elif ch.isdigit() or ch == ".":
            start = i
            while i < len(source) and (source[i].isdigit() or source[i] == "."):
                i += 1
            tokens.append(Token("number", source[start:i]))
        elif ch.isalpha() or ch == "_":
            start = i
            while i < len(source) and (source[i].isalnum() or source[i] == "_"):
                i += 1
            tokens.append(Token("name", source[start:i]))
        elif ch in "+-*/()=;":
            tokens.append(Token(ch, ch))
            i += 1
        else:
            raise SyntaxError(f"unexpected character {ch!r} at position {i}")
    tokens.append(Token("end", ""))
    return tokens


class Parser:
    """Recursive descent: statement -> assignment | expression; expression -> term (+|- term)*."""

    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.pos = 0

    def peek(self) -> Token:
        return self.tokens[self.pos]

    def take(self, kind: str) -> Token:
        token = self.peek()
        if token.kind != kind:
            raise SyntaxError(f"expected {kind}, found {token.kind} {token.text!r}")
        self.pos += 1
        return token

    def program(self) -> list:
        statements = [self.statement()]
        while self.peek().kind == ";":
            self.take(";")
            statements.append(self.statement())
        self.take("end")
        return statements

    def statement(self):
        if self.peek().kind == "name" and self.tokens[self.pos + 1].kind == "=":
            name = self.take("name").text
            self.take("=")
            return ("assign", name, self.expression())
        return self.expression()

    def expression(self):
        node = self.term()
        while self.peek().kind in "+-":
            op = self.take(self.peek().kind).kind
            node = (op, node, self.term())
        return node

    def term(self):
        node = self.factor()
        while self.peek().kind in "*/":
            op = self.take(self.peek().kind).kind
            node = (op, node, self.factor())
        return node

    def factor(self):
        token = self.peek()
        if token.kind == "number":
            self.take("number")
            return ("num", float(token.text))
        if token.kind == "name":
            self.take("name")
            return ("var", token.text)
        if token.kind == "-":
            self.take("-")
            return ("-", ("num", 0.0), self.factor())
        self.take("(")
        node = self.expression()
        self.take(")")
        return node


def evaluate(node, env: dict[str, float]) -> float:
    kind = node[0]
    if kind == "num":
        return node[1]
    if kind == "var":
        if node[1] not in env:
            raise NameError(f"undefined variable {node[1]!r}")
        return env[node[1]]
    if kind == "assign":
        env[node[1]] = evaluate(node[2], env)
        return env[node[1]]
    left = evaluate(node[1], env)
    right = evaluate(node[2], env)
    if kind == "+":
        return left + right
    if kind == "-":
        return left - right
    if kind == "*":
        return left * right
    if right == 0:
        raise ZeroDivisionError("division by zero")
    return left / right


def run(source: str) -> float:
    """Run every statement and return the value of the last one."""
    env: dict[str, float] = {}
    result = 0.0
    for statement in Parser(tokenize(source)).program():
        result = evaluate(statement, env)
    return result


if __name__ == "__main__":
    while True:
        try:
            line = input("calc> ")
        except EOFError:
            break
        try:
            print(run(line))
        except (SyntaxError, NameError, ZeroDivisionError) as error:
            print(f"error: {error}")
