-- Revision 0013: a personal token and a submission made with it.
INSERT INTO personal_tokens (id, user_id, name, token_hash, created_at, expires_at, last_used_at, revoked_at) VALUES ('token-lea', 'user-learner-1', 'laptop notebook', 'c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9', '2026-10-16 08:00:00.000000', '2036-10-16 08:00:00.000000', '2026-10-16 09:00:00.000000', NULL);
INSERT INTO submissions (id, exercise_id, exercise_version, learner, code, status, score, max_score, diagnosis, checks, feedback, attempts, created_at, started_at, graded_at, user_id, course_id, personal_token_id) VALUES ('sub-0013-token', 'train-step', 'v-0013', 'lea@school.test', 'def train_step(model, optimizer, loss_fn, x, y):
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.item()
', 'graded', 5.0, 5.0, 'correct', '[{"id": "order", "passed": true, "points": 5.0, "max_points": 5.0}]', 'Correct.', 1, '2026-10-16 09:00:00.000000', '2026-10-16 09:00:01.000000', '2026-10-16 09:00:02.000000', 'user-learner-1', 'course-1', 'token-lea');
