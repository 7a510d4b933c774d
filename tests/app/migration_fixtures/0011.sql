-- Revision 0011: sign-ups counted per address; a login state with its client address.
INSERT INTO sign_ups (id, client_address, signed_up_at) VALUES (1, '198.51.100.20', '2026-10-14 08:00:00.000000');
INSERT INTO lti_login_states (state, nonce, platform_id, target_link_uri, created_at, expires_at, used_at, storage_target, storage_value, client_address) VALUES ('state-0011', 'nonce-0011', 'platform-1', 'https://loopgrade.school.test/lti/launch', '2026-10-14 08:00:00.000000', '2036-10-14 08:10:00.000000', NULL, NULL, NULL, '198.51.100.21');
