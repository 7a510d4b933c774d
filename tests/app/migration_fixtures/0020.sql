-- Revision 0020: a learner's report of a diagnosis that looks wrong.
INSERT INTO diagnosis_reports (id, submission_id, course_id, user_id, diagnosis, note, reported_at) VALUES (1, 'sub-0002-leo-overridden', 'course-1', 'user-learner-2', 'missing-backward', 'I did call backward, in a helper', '2026-10-21 09:00:00.000000');
