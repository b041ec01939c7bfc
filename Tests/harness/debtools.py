"""The built .deb as a bad release would ship it, for the upgrade tests (Tests/package,
Tests/system): unpacked, one more migration added (an ALTER of a table that does not exist),
its version raised, repacked."""
import os
import subprocess


def deb_version(deb):
    return subprocess.run(["dpkg-deb", "-f", deb, "Version"], capture_output=True, text=True, check=True).stdout.strip()


def repack_with_broken_migration(deb, tmp):
    """(path of the broken .deb, its version)."""
    version = deb_version(deb)
    root = os.path.join(tmp, "broken")
    subprocess.run(["dpkg-deb", "-R", deb, root], check=True)
    sql_dir = os.path.join(root, "usr/share/fcgibilling/sql")
    number = len([f for f in os.listdir(sql_dir) if f.endswith(".sql")]) + 1
    name = "%03d_broken.sql" % number
    with open(os.path.join(sql_dir, name), "w") as f:
        f.write("-- A release whose migration cannot apply.\nALTER TABLE no_such_table ADD COLUMN nothing INT;\n")
    control = os.path.join(root, "DEBIAN", "control")
    with open(control) as f:
        text = f.read()
    broken_version = version + "+broken1"
    with open(control, "w") as f:
        f.write(text.replace("Version: %s\n" % version, "Version: %s\n" % broken_version))
    digest = subprocess.run(["md5sum", os.path.join(sql_dir, name)], capture_output=True, text=True, check=True).stdout.split()[0]
    with open(os.path.join(root, "DEBIAN", "md5sums"), "a") as f:
        f.write("%s  usr/share/fcgibilling/sql/%s\n" % (digest, name))
    out = os.path.join(tmp, "fcgibilling_%s.deb" % broken_version)
    subprocess.run(["dpkg-deb", "--root-owner-group", "-b", root, out], check=True, capture_output=True)
    return out, broken_version
