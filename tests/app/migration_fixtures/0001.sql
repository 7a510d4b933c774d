-- Revision 0001: API keys and submissions (no people yet).
INSERT INTO api_keys (id, name, key_hash, created_at, revoked_at) VALUES ('key-0001', 'first key', 'a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1', '2026-10-01 08:00:00.000000', NULL);
INSERT INTO api_keys (id, name, key_hash, created_at, revoked_at) VALUES ('key-0001-revoked', 'old key', 'b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2', '2026-10-01 08:00:00.000000', '2026-10-02 08:00:00.000000');
INSERT INTO submissions (id, exercise_id, exercise_version, learner, code, status, score, max_score, diagnosis, checks, feedback, plots, output, error_message, attempts, created_at, started_at, graded_at, api_key_id) VALUES ('sub-0001-graded', 'fix-the-loop', 'v-0001', 'anon-learner', 'def train_step(model, optimizer, loss_fn, x, y):
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.item()
', 'graded', 6.5, 10.0, 'missing-zero-grad', '[{"id": "loss-decreases", "passed": true, "points": 6.5, "max_points": 6.5}, {"id": "grads-cleared", "passed": false, "points": 0.0, "max_points": 3.5}]', 'Gradients **accumulate**.', '{"loss": [1.5, 1.25, 1.0]}', 'printed 3 lines', NULL, 1, '2026-10-01 09:00:00.000000', '2026-10-01 09:00:01.000000', '2026-10-01 09:00:02.500000', 'key-0001');
INSERT INTO submissions (id, exercise_id, exercise_version, learner, code, status, score, max_score, diagnosis, checks, feedback, plots, output, error_message, attempts, created_at, started_at, graded_at, api_key_id) VALUES ('sub-0001-error', 'fix-the-loop', 'v-0001', 'anon-learner', 'x = 1', 'error', NULL, NULL, NULL, NULL, NULL, NULL, NULL, 'the sandbox was unavailable', 3, '2026-10-01 09:10:00.000000', '2026-10-01 09:10:01.000000', NULL, NULL);
INSERT INTO submissions (id, exercise_id, exercise_version, learner, code, status, score, max_score, diagnosis, checks, feedback, plots, output, error_message, attempts, created_at, started_at, graded_at, api_key_id) VALUES ('sub-0001-queued', 'fix-the-loop', 'v-0001', 'anon-learner', 'x = 2', 'queued', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0, '2026-10-01 09:20:00.000000', NULL, NULL, NULL);
