"""People in the loop: approval policies, requests decided by a person, questions, deadlines, webhooks.

``policy`` is plain Python (the definition schemas use it); ``services`` holds
the writes, ``gate`` the session side, ``webhooks`` the notifications.
"""
