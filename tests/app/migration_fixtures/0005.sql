-- Revision 0005: LTI (a platform and what its launches made) and webhooks. The tool key is
-- kept in plain text, as before 0008 (start-up seals it).
INSERT INTO lti_platforms (id, issuer, client_id, auth_url, token_url, jwks_url, frame_origins, created_at) VALUES ('platform-1', 'https://canvas.school.test', 'client-0005', 'https://canvas.school.test/auth', 'https://canvas.school.test/token', 'https://canvas.school.test/jwks', '["https://canvas.school.test"]', '2026-10-08 08:00:00.000000');
INSERT INTO lti_deployments (id, platform_id, deployment_id) VALUES ('deployment-1', 'platform-1', 'deploy-0005');
INSERT INTO lti_tool_keys (kid, private_key_pem, created_at, retired_at) VALUES ('kid-plain-0005', '-----BEGIN PRIVATE KEY-----
MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQDYeBgPtPW2pqA7
Vu42E39v1LDxu0XB/zFRRIRl49R2bm/Xex2Zs6uKiYQLOJt1HmdJA7iGOeXZzKL+
86WE4W2DdOIba16i6mBYmIKMpkHH6V6JngJWHHAkp2CcpmTKTQygkRStXxGXdBd2
rrd3KnlxP8mzqoTzGvVWtivREJm8LMmO8umwhqp3Zk9UX7ABz3WxJBHt1zZg3NOl
XF6Rl+rGGs4vZ1SxBoPB0Q0s2cE6LfGgDrJCOLVZAckESj820txhkZrDRNCn72V4
KZ2U/uNeaWPkCyh744En78l7BPygY4z8nh18mjiaeZI+VZ4WWbvpbnq8wfFm+6zm
TokQuSgnAgMBAAECggEALyKzZpQqXuvYfyNWOoszWCgRoYl8TpphZEdNpxwdku5I
Rz0FPIc9hqycBo98dlu49NKtFvk7fhoLsgVe2Nj3bkUAySSvljz/3rrSzoqTT1MX
JVM1QgfuOWUC6glncA+n/LyqqnfFjluWkl7ID1g92nWf15H9YixQGOIRF3SMbUdS
1VbGk/ID+QIpWOwpJJwR9r6RkYMx9CbHxiJH6M2xj7mrI6oKQqSjQaA6bm2iNv43
y7p6hNkW1p51kuUcn4j4wlPR+5fB/8hqZ1OxfJUFrKW6isMScvBKHeTxdx+dwdP0
qaA61ntY/+4bfAS3vaigrbkaEDyfR4gy4m50NHFNVQKBgQDrdleReL1IoCehZN9X
vbfJGuVbee9fxefl4Eb73Ypw7M98HvMeQuBLECtpvYsnHU4SRnTb+ezzNTAbjwm6
JDcO5UM9jcj3j5EPHy0gVPULBnEPiZsea3uk/ZZG60nf1AVvxF+3wV+Vl9snNlie
k93Ti4Jk4rJPiZrnL9ODQQicFQKBgQDrWabtADpBqqVUX4EGegyqzibP7MGzS4AQ
2e/Psydh6RgtuP9is2DNrGi5o/423Md/O7WeyngXbXsL0gC6YEiBkiVCkicjTvxS
2qX9gDcnmHZ96MzjagHbdmbCs5b3o3HY6kOuXO3G6Q29oSqqmN/XI5jeo1yE3Qmd
3iNJ/+s2SwKBgQCEAsJPrdi5igkOBGbvY09R8cFbSv64vFUqXVaOyQNgEnS1SwjV
E3t6uiMM0pbcpCJsPpIv7mw5Yr2JBeXXNYykzkankQF2Qkh6qOj88oS73K2wn16X
bH1S4FXLhwjQ86bkpb1gYYr8bLoSvvZqWc6JVvMRKsP7sdNmADteoCx6jQKBgCfe
UhbH+RZyr/sxCoxsVIUC0zRZ6R5UZed049kNglhlwkDMnAa+WGG/GSaJj2D/2ZPG
K6gwqFNfqn6AHrtz4BSDC2jRlWu3z6rBe2kMNUux2jDOJRdJN/NThWjqP2LH/1s9
pCV/fJA7nqZHDRFFQHYTg6wDhILFZwGlRdkdT10tAoGAHulIkioqKqN2iUHZvozn
i+myJbdm/IFwA+hYEger7TEjpORlyB1KBF0cGMD/K/X8j9AcclymVsSRElvNL7iL
Sl+49HoqBf184rQGjzFlBcFnZpKV8fD2Z1MRBcVSw19Qy463FVqBeKUdaIaUQFsY
B20/WEffrA8YwUH6RQ8e5RY=
-----END PRIVATE KEY-----
', '2026-10-08 08:00:00.000000', NULL);
INSERT INTO lti_login_states (state, nonce, platform_id, target_link_uri, created_at, expires_at, used_at) VALUES ('state-0005', 'nonce-0005', 'platform-1', 'https://loopgrade.school.test/lti/launch', '2026-10-08 08:00:00.000000', '2026-10-08 08:10:00.000000', NULL);
INSERT INTO lti_users (id, platform_id, subject, user_id, created_at) VALUES ('lti-user-lea', 'platform-1', 'canvas-sub-lea', 'user-learner-1', '2026-10-08 08:01:00.000000');
INSERT INTO lti_contexts (id, platform_id, deployment_id, context_id, course_id, memberships_url, roster_synced_at, created_at) VALUES ('context-1', 'platform-1', 'deploy-0005', 'canvas-course-7', 'course-1', 'https://canvas.school.test/api/lti/courses/7/names_and_roles', '2026-10-08 08:02:00.000000', '2026-10-08 08:01:00.000000');
INSERT INTO lti_resource_links (id, platform_id, resource_link_id, lti_context_id, exercise_id, title, lineitem_url, ags_scopes, created_at) VALUES ('link-1', 'platform-1', 'canvas-link-1', 'context-1', 'fix-the-loop', 'Fix the loop', 'https://canvas.school.test/api/lti/courses/7/line_items/3', '["https://purl.imsglobal.org/spec/lti-ags/scope/score"]', '2026-10-08 08:01:00.000000');
INSERT INTO lti_launch_tickets (token_hash, user_id, target_path, created_at, expires_at, used_at) VALUES ('e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5', 'user-learner-1', '/courses/course-1/exercises/fix-the-loop', '2026-10-08 08:01:00.000000', '2026-10-08 08:02:00.000000', '2026-10-08 08:01:05.000000');
INSERT INTO webhooks (id, course_id, url, secret, created_at, revoked_at) VALUES ('webhook-1', 'course-1', 'https://grades.school.test/hook', 'whsec-0005-secret', '2026-10-08 09:00:00.000000', NULL);
INSERT INTO outbox (id, kind, payload, status, attempts, created_at, next_attempt_at, delivered_at, last_error) VALUES (3, 'lti-score', '{"submission_id": "sub-0002-lea", "link": "link-1"}', 'failed', 9, '2026-10-08 09:00:00.000000', '2026-10-08 09:00:00.000000', NULL, 'the platform answered 401');
