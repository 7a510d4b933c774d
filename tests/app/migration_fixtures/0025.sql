-- Revision 0025: a hint opened in practice (no course), once.
INSERT INTO hint_opens (id, user_id, course_id, exercise_id, submission_id, diagnosis, level, opened_at) VALUES (4, 'user-learner-1', NULL, 'train-step', 'sub-0024-claims', 'missing-zero-grad', 1, '2026-10-27 09:00:00.000000');
