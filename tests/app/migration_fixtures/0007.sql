-- Revision 0007: drafts (in a course and practice) and kept submissions.
INSERT INTO drafts (id, user_id, course_id, exercise_id, code, updated_at) VALUES ('draft-course', 'user-learner-1', 'course-1', 'train-step', 'def train_step(): ...', '2026-10-10 09:00:00.000000');
INSERT INTO drafts (id, user_id, course_id, exercise_id, code, updated_at) VALUES ('draft-practice', 'user-learner-1', NULL, 'train-step', 'print(1)', '2026-10-10 09:01:00.000000');
INSERT INTO kept_submissions (token_hash, page_path, code, client_address, created_at, expires_at) VALUES ('f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6', '/exercises/train-step', 'kept code', '203.0.113.10', '2026-10-10 09:02:00.000000', '2036-10-10 09:02:00.000000');
