"""Not provided by crescent (see mooncake._not_here)."""
from mooncake._not_here import refuse

refuse(__name__)
