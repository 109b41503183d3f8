package reprocess.hadoop;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;

import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's {@code file:} filesystem, with permissions set by a system call instead of a {@code chmod} process.
 *
 * <p>Without Hadoop's native library (the pyspark wheel has none) {@link RawLocalFileSystem#setPermission} starts a
 * {@code chmod} process, and Hadoop calls it for every file it creates and every folder it makes: about 730
 * processes per cycle, 3.5-5 ms each (bench/RESULTS.md, fourteenth run). This class sets the same mode through
 * {@link Files#setPosixFilePermissions}. It is still a {@link LocalFileSystem} (checksums, and
 * {@code FileSystem.getLocal} casts to it). Modes with bits a {@link PosixFilePermission} set cannot hold (sticky,
 * setuid, setgid), and filesystems without POSIX permissions, go to Hadoop's own {@code chmod} as before.
 *
 * <p>Enabled by {@code spark.hadoop.fs.file.impl=reprocess.hadoop.PosixLocalFileSystem}
 * ({@code reprocess.spark_env.local_fs_conf}).
 */
public class PosixLocalFileSystem extends LocalFileSystem {

  public PosixLocalFileSystem() {
    super(new Raw());
  }

  /** The raw (checksum-less) filesystem under it: Hadoop's, but for {@link #setPermission}. */
  public static class Raw extends RawLocalFileSystem {

    private static final PosixFilePermission[] BITS = {  // bit 8 (0400) first, bit 0 (0001) last
        PosixFilePermission.OWNER_READ, PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_EXECUTE,
        PosixFilePermission.GROUP_READ, PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_EXECUTE,
        PosixFilePermission.OTHERS_READ, PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_EXECUTE};

    /** The set of permissions of a mode's low nine bits. */
    static Set<PosixFilePermission> posix(int mode) {
      Set<PosixFilePermission> set = EnumSet.noneOf(PosixFilePermission.class);
      for (int i = 0; i < BITS.length; i++) {
        if ((mode & (0400 >> i)) != 0) {
          set.add(BITS[i]);
        }
      }
      return set;
    }

    @Override
    public void setPermission(Path p, FsPermission permission) throws IOException {
      int mode = permission.toShort();
      if ((mode & ~0777) != 0) {
        super.setPermission(p, permission);
        return;
      }
      try {
        Files.setPosixFilePermissions(pathToFile(p).toPath(), posix(mode));
      } catch (NoSuchFileException e) {
        throw new FileNotFoundException("File " + p + " does not exist");
      } catch (UnsupportedOperationException e) {
        super.setPermission(p, permission);
      }
    }
  }
}
