-- Revision 0021: a course's hint settings and hints opened.
UPDATE courses SET hint_unlock_attempts = 2, hints_hide_fix = TRUE, lesson_url = 'https://school.test/lessons/3' WHERE id = 'course-1';
INSERT INTO courses (id, name, join_code, created_at, created_by_id, hint_unlock_attempts, hints_hide_fix, lesson_url) VALUES ('course-2', 'Optimisers', 'JOIN0021', '2026-10-22 08:00:00.000000', 'user-teacher', 0, FALSE, '');
INSERT INTO enrolments (id, course_id, user_id, role, created_at) VALUES ('enrol-teacher-2', 'course-2', 'user-teacher', 'instructor', '2026-10-22 08:00:00.000000');
INSERT INTO hint_opens (id, user_id, course_id, exercise_id, submission_id, diagnosis, level, opened_at) VALUES (1, 'user-learner-2', 'course-1', 'fix-the-loop', 'sub-0002-leo-overridden', 'missing-backward', 1, '2026-10-22 09:00:00.000000');
INSERT INTO hint_opens (id, user_id, course_id, exercise_id, submission_id, diagnosis, level, opened_at) VALUES (2, 'user-learner-2', 'course-1', 'fix-the-loop', 'sub-0002-leo-overridden', 'missing-backward', 2, '2026-10-22 09:05:00.000000');
-- Opened twice at once (as before 0025's unique indexes): 0025 keeps the first.
INSERT INTO hint_opens (id, user_id, course_id, exercise_id, submission_id, diagnosis, level, opened_at) VALUES (3, 'user-learner-2', 'course-1', 'fix-the-loop', 'sub-0002-leo-overridden', 'missing-backward', 1, '2026-10-22 09:00:00.000000');
