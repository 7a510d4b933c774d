"""Outgoing mail: to an SMTP server (`LOOPGRADE_SMTP_*`), or, with no host set, to the server's
log, so that one process on a laptop works with nothing else."""

from __future__ import annotations

import logging
import smtplib
import ssl
from email.message import EmailMessage
from email.utils import make_msgid

from app.settings import Settings

log = logging.getLogger("loopgrade.mail")


class MailNotSent(Exception):
    """The SMTP server could not be reached or refused the message."""


def compose(settings: Settings, *, to: str, subject: str, body: str) -> EmailMessage:
    message = EmailMessage()
    message["From"] = settings.mail_from
    message["To"] = to
    message["Subject"] = subject
    message["Message-ID"] = make_msgid(domain="loopgrade")
    message.set_content(body)
    return message


def send_mail(settings: Settings, message: EmailMessage) -> None:
    """Send `message` by SMTP, or write it to the log when no SMTP host is set."""
    if not settings.smtp_host:
        # Decoded, so that the link can be copied from the log as it is.
        log.warning(
            "mail (no LOOPGRADE_SMTP_HOST: written here, not sent)\nFrom: %s\nTo: %s\n"
            "Subject: %s\n\n%s",
            message["From"],
            message["To"],
            message["Subject"],
            message.get_content(),
        )
        return
    try:
        with _connect(settings) as smtp:
            if settings.smtp_user:
                smtp.login(settings.smtp_user, settings.smtp_password)
            smtp.send_message(message)
    except (OSError, smtplib.SMTPException) as exc:
        raise MailNotSent(
            f"mail to {message['To']} not sent through "
            f"{settings.smtp_host}:{settings.smtp_port}: {exc}"
        ) from exc


def _connect(settings: Settings) -> smtplib.SMTP:
    host, port, timeout = settings.smtp_host, settings.smtp_port, settings.smtp_timeout_seconds
    if settings.smtp_tls == "tls":
        return smtplib.SMTP_SSL(host, port, timeout=timeout, context=ssl.create_default_context())
    smtp = smtplib.SMTP(host, port, timeout=timeout)
    if settings.smtp_tls == "starttls":
        try:
            smtp.starttls(context=ssl.create_default_context())
        except BaseException:
            smtp.close()
            raise
    return smtp
