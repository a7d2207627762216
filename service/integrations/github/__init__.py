"""GitHub's REST API (client.py): the PR bot's comments and merge gate (service/webhooks/github.py)
and the alert bot's comments (service/alerts/bot.py) all go through it."""
