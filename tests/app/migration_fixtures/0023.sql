-- Revision 0023: the course's own exercise order, units, a removed exercise.
UPDATE assignments SET position = 2, unit = 'Unit 1' WHERE id = 'assign-fix';
UPDATE assignments SET position = 1, unit = 'Unit 1' WHERE id = 'assign-train';
INSERT INTO assignments (id, course_id, exercise_id, due_at, late_policy, late_penalty_percent_per_day, scoring_policy, created_at, max_attempts, time_limit_minutes, position, unit, removed_at) VALUES ('assign-clip', 'course-1', 'clip-gradients', NULL, 'penalty', 5, 'best', '2026-10-24 08:00:00.000000', NULL, NULL, 3, 'Unit 2', '2026-10-25 08:00:00.000000');
