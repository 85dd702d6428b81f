import ast

from pgrpo.env import load_problems
from pgrpo.env.attempts import honest_solution, wrong_variants


def test_honest_solutions_drop_comments_and_nothing_else():
    for p in load_problems():
        honest = honest_solution(p)
        assert "#" not in honest
        assert ast.dump(ast.parse(honest)) == ast.dump(ast.parse(p.canonical_solution)), p.id


def test_wrong_variants_never_touch_a_while_loop():
    # an edited loop condition or step could spin until the grader's timeout
    def loops(src: str) -> list[str]:
        return [ast.dump(n) for n in ast.walk(ast.parse(src)) if isinstance(n, ast.While)]

    for p in load_problems():
        for variant in wrong_variants(p):
            assert loops(variant) == loops(p.canonical_solution), p.id
