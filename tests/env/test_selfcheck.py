import copy

import pytest
from sample_problems import TWO_SUM

from pgrpo.env import MODES
from pgrpo.env.selfcheck import CANONICAL, exploit_matrix, format_matrix, is_diagonal


@pytest.fixture(scope="module")
def matrix() -> dict:
    return exploit_matrix([TWO_SUM], variants=1)


def test_matrix_is_diagonal_and_prints_every_row_and_column(matrix):
    assert is_diagonal(matrix)
    table = format_matrix(matrix)
    assert all(m in table for m in MODES) and CANONICAL in table and "diagonal: yes" in table


def test_an_off_diagonal_pass_breaks_the_diagonal(matrix):
    broken = copy.deepcopy(matrix)
    broken["rows"]["sentinel"]["exit_code"]["passed"] = 1
    assert not is_diagonal(broken) and "diagonal: NO" in format_matrix(broken)
