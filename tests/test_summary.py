from pathlib import Path

from pgrpo.summary import summary


def test_a_run_without_teacher_rows_summarises_the_student_alone():
    scalars = {"hack/student": [(0, 0.0), (1, 0.5)], "solve/student": [(0, 0.25), (1, 0.5)],
               "proj/cin_student": [(1, 0.3)], "proj/cin_null_student": [(1, 0.15)],
               "proj/cin_teacher": [(1, 0.0)], "proj/cin_null_teacher": [(1, 0.0)]}
    text = summary(scalars, Path("logs/honest/version_0"), "none", 2, 4.0)
    assert "student 0.300 (null 0.150)" in text and "teacher" not in text
