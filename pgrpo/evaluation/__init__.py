"""A policy sampled and graded outside the training step. evaluate.py samples and grades a set of problems;
end_eval.py is a run's end-of-run evaluation (its primary numbers); base_eval.py what the embedded build
measures of its base; intervals.py the intervals every rate is reported with; sampled_pool.py a teacher pool
sampled from a model's graded samples."""
