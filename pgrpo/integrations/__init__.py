"""Other hosts for pgrpo's interventions: each module runs the same intervention classes inside another trainer."""
