"""placeholder"""
def sync_demo_submissions(root, labs, check):
    return []
