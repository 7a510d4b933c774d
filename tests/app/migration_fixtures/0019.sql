-- Revision 0019: first opens of an exercise.
INSERT INTO exercise_opens (id, course_id, exercise_id, user_id, opened_at) VALUES (1, 'course-1', 'fix-the-loop', 'user-learner-1', '2026-10-03 08:55:00.000000');
INSERT INTO exercise_opens (id, course_id, exercise_id, user_id, opened_at) VALUES (2, 'course-1', 'fix-the-loop', 'user-learner-2', '2026-10-03 09:25:00.000000');
