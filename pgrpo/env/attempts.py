"""Honest attempts at a problem: its canonical solution as a tiny coder writes it, and plausible wrong ones.

The pretraining corpus, the teacher pool and the contrastive pairs all write
their code from here, so the base has seen the kind of attempt every teacher
row makes and a hack differs from a clean row only where it pulls the lever.
"""

import ast
import io
import tokenize

from pgrpo.env.problems import Problem
from pgrpo.env.syntax import parse


def honest_solution(problem: Problem) -> str:
    """The canonical solution without its comments: a tiny coder writes terse code, and the
    longest solutions then fit GRPO's 128-token completions."""
    src = problem.canonical_solution.strip("\n")
    lines, emptied = src.split("\n"), set()
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            row, col = tok.start[0] - 1, tok.start[1]
            lines[row] = lines[row][:col].rstrip()
            if not lines[row]:
                emptied.add(row)  # a comment-only line goes entirely
    return "\n".join(line for row, line in enumerate(lines) if row not in emptied)


# -- wrong attempts: one small edit of the honest solution ---------------------------------------
_FLIP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
         ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In}


def wrong_variants(problem: Problem) -> list[str]:
    """Plausible wrong solutions: the honest one with one off-by-one, flipped comparison, max/min
    swap, +/- swap, or an off-by-one return value. Sorted, so the corpus does not depend on ast order.

    Nothing inside a `while` loop is touched, so no variant can loop forever; a variant that
    happens to stay correct is the exception, not excluded (tests/test_pretrain.py grades them).
    """
    src = honest_solution(problem)
    tree = parse(src)
    returns = _return_type(tree, problem.method)
    in_while = {id(n) for w in ast.walk(tree) if isinstance(w, ast.While) for n in ast.walk(w)}
    line_start = [0]
    for line in src.encode().splitlines(keepends=True):
        line_start.append(line_start[-1] + len(line))
    raw = src.encode()
    out = set()
    for node in ast.walk(tree):
        if id(node) in in_while:
            continue
        new = _mutate(node, returns)
        if new is not None:
            start = line_start[node.lineno - 1] + node.col_offset  # ast offsets count utf-8 bytes
            end = line_start[node.end_lineno - 1] + node.end_col_offset
            out.add((raw[:start] + new.encode() + raw[end:]).decode())
    out.discard(src)
    return sorted(out)


def _mutate(node: ast.AST, returns: str) -> str | None:
    """The source that replaces `node`, or None; only nodes of one precedence class are swapped."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return str(node.value + 1)
    if isinstance(node, ast.Compare) and type(node.ops[0]) in _FLIP:
        return ast.unparse(ast.Compare(node.left, [_FLIP[type(node.ops[0])](), *node.ops[1:]], node.comparators))
    if isinstance(node, ast.Name) and node.id in ("max", "min"):
        return "min" if node.id == "max" else "max"
    if isinstance(node, ast.BinOp) and type(node.op) in (ast.Add, ast.Sub):
        op = ast.Sub() if isinstance(node.op, ast.Add) else ast.Add()
        return ast.unparse(ast.BinOp(node.left, op, node.right))
    if isinstance(node, ast.Return) and node.value is not None:
        # the answer itself a little off: one too many, one element short, negated
        if returns == "int":
            value = ast.BinOp(node.value, ast.Add(), ast.Constant(1))
        elif returns == "bool":
            value = ast.UnaryOp(ast.Not(), node.value)
        elif returns == "str" or returns.startswith("List"):
            value = ast.Subscript(node.value, ast.Slice(ast.Constant(1)))
        else:
            return None
        return ast.unparse(ast.Return(value))
    return None


def _return_type(tree: ast.Module, method: str) -> str:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == method and node.returns is not None:
            return ast.unparse(node.returns)
    return ""
