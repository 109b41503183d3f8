package reprocess.hadoop;

import java.io.File;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.OutputStream;
import java.net.URI;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.file.Files;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.BasicFileAttributes;
import java.nio.file.attribute.PosixFileAttributes;
import java.nio.file.attribute.PosixFilePermission;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.CommonPathCapabilities;
import org.apache.hadoop.fs.EtagSource;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FSDataOutputStreamBuilder;
import org.apache.hadoop.fs.FileAlreadyExistsException;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Options;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * A filesystem for tests: the local disk under the scheme {@code cfile:}, with an object store's conditional
 * creates and ETags, so that the warehouse's object-store code runs here against a scheme Python cannot open.
 *
 * <p>{@link #createFile} honours the two options S3A (Hadoop 3.5) implements with {@code If-None-Match: *} and
 * {@code If-Match}: {@code fs.option.create.conditional.overwrite} (create only if absent) and
 * {@code fs.option.create.conditional.overwrite.etag} (replace only if the file's ETag is the one given). Like an
 * object store, the file appears whole when the stream is closed, and a failed condition fails the close with
 * {@link FileAlreadyExistsException}: the bytes go to a temporary file, then a hard link (which fails if the name
 * exists) or, for an ETag match, a rename done under an exclusive lock on a sidecar file, so that processes
 * racing on one name are serialized. The ETag is the file's inode, modification time and size. Everything else is
 * Hadoop's {@link RawLocalFileSystem}, whose renames are atomic: unlike S3, so the tests cannot show a rename's cost.
 *
 * <p>Enabled by {@code fs.cfile.impl=reprocess.hadoop.ConditionalLocalFileSystem}; {@code cfile:///tmp/w} is the
 * local {@code /tmp/w}. Not for production: it exists to test the code S3A runs, without S3.
 */
public class ConditionalLocalFileSystem extends RawLocalFileSystem {

  public static final String SCHEME = "cfile";
  private static final URI NAME = URI.create(SCHEME + ":///");
  private static final String IF_ABSENT = Options.CreateFileOptionKeys.FS_OPTION_CREATE_CONDITIONAL_OVERWRITE;
  private static final String IF_MATCH = Options.CreateFileOptionKeys.FS_OPTION_CREATE_CONDITIONAL_OVERWRITE_ETAG;

  @Override
  public URI getUri() {
    return NAME;
  }

  @Override
  public String getScheme() {
    return SCHEME;
  }

  @Override
  public void initialize(URI uri, Configuration conf) throws IOException {
    super.initialize(NAME, conf);
  }

  @Override
  public boolean hasPathCapability(Path path, String capability) throws IOException {
    switch (capability) {
      case IF_ABSENT:
      case IF_MATCH:
      case CommonPathCapabilities.ETAGS_AVAILABLE:
        return true;
      default:
        return super.hasPathCapability(path, capability);
    }
  }

  // Hadoop's own statuses read their permissions through new File(path.toUri()), which only takes file: URIs: this
  // filesystem makes its statuses itself, from the file's POSIX attributes.

  @Override
  public FileStatus getFileStatus(Path path) throws IOException {
    return statusOf(pathToFile(path), makeQualified(path));
  }

  @Override
  public FileStatus getFileLinkStatus(Path path) throws IOException {
    return getFileStatus(path);
  }

  @Override
  public FileStatus[] listStatus(Path path) throws IOException {
    File file = pathToFile(path);
    Path qualified = makeQualified(path);
    if (!file.isDirectory()) {
      return new FileStatus[] {statusOf(file, qualified)};
    }
    String[] names = file.list();
    if (names == null) {
      throw new IOException("cannot list " + path);
    }
    List<FileStatus> out = new ArrayList<>();
    for (String name : names) {
      try {
        out.add(statusOf(new File(file, name), new Path(qualified, name)));
      } catch (FileNotFoundException e) {
        // deleted since the listing
      }
    }
    return out.toArray(new FileStatus[0]);
  }

  private FileStatus statusOf(File file, Path qualified) throws IOException {
    PosixFileAttributes a;
    try {
      a = Files.readAttributes(file.toPath(), PosixFileAttributes.class);
    } catch (java.nio.file.NoSuchFileException e) {
      throw new FileNotFoundException("File " + qualified + " does not exist");
    }
    int mode = 0;
    for (PosixFilePermission bit : a.permissions()) {
      mode |= 0400 >> bit.ordinal();  // OWNER_READ (0400) is ordinal 0, OTHERS_EXECUTE (0001) is 8
    }
    FileStatus status = new FileStatus(a.isDirectory() ? 0 : a.size(), a.isDirectory(), 1,
        getDefaultBlockSize(qualified), a.lastModifiedTime().toMillis(), a.lastAccessTime().toMillis(),
        new FsPermission((short) mode), a.owner().getName(), a.group().getName(), qualified);
    return a.isDirectory() ? status : new Tagged(status, etagOf(a));
  }

  @Override
  public FSDataOutputStreamBuilder<FSDataOutputStream, ?> createFile(Path path) {
    return new Builder(this, path);
  }

  /**
   * A version's ETag, from the attributes the status was made from: the file's identity (device and inode), its
   * modification time in nanoseconds and its size. A replace renames a new file into place, so every replace
   * changes it. Read with the status, never later: it names the version the status describes.
   */
  static String etagOf(BasicFileAttributes a) {
    return a.fileKey() + "-" + a.lastModifiedTime().to(TimeUnit.NANOSECONDS) + "-" + a.size();
  }

  /** A file's status with its ETag. */
  public static final class Tagged extends FileStatus implements EtagSource {
    private static final long serialVersionUID = 1L;
    private final String etag;

    Tagged(FileStatus status, String etag) throws IOException {
      super(status);
      this.etag = etag;
    }

    @Override
    public String getEtag() {
      return etag;
    }
  }

  /** {@link #createFile}'s builder: a plain create, or one of the two conditional creates. */
  public static final class Builder extends FSDataOutputStreamBuilder<FSDataOutputStream, Builder> {
    private final ConditionalLocalFileSystem fs;

    Builder(ConditionalLocalFileSystem fs, Path path) {
      super(fs, path);
      this.fs = fs;
    }

    @Override
    public Builder getThisBuilder() {
      return this;
    }

    @Override
    public FSDataOutputStream build() throws IOException {
      rejectUnknownMandatoryKeys(List.of(IF_ABSENT, IF_MATCH), " by " + getClass().getName());
      boolean ifAbsent = getOptions().getBoolean(IF_ABSENT, false);
      String etag = getOptions().getTrimmed(IF_MATCH, "");
      if (!ifAbsent && etag.isEmpty()) {
        return fs.create(getPath(), getPermission(), getFlags(), getBufferSize(), getReplication(),
            getBlockSize(), getProgress(), getChecksumOpt());
      }
      File target = fs.pathToFile(getPath());
      File parent = target.getParentFile();
      if (!parent.isDirectory() && !parent.mkdirs() && !parent.isDirectory()) {
        throw new IOException("cannot create " + parent);
      }
      File tmp = File.createTempFile("." + target.getName() + ".", ".tmp", parent);
      OutputStream out = new ClosingOutput(Files.newOutputStream(tmp.toPath()), tmp, target, ifAbsent, etag,
          getPath());
      return new FSDataOutputStream(out, null);
    }
  }

  private static final Object CAS = new Object();

  /** Writes a temporary file; its close makes it the target if the condition holds. */
  public static final class ClosingOutput extends OutputStream {
    private final OutputStream out;
    private final File tmp;
    private final File target;
    private final boolean ifAbsent;
    private final String etag;
    private final Path path;
    private boolean closed;

    ClosingOutput(OutputStream out, File tmp, File target, boolean ifAbsent, String etag, Path path) {
      this.out = out;
      this.tmp = tmp;
      this.target = target;
      this.ifAbsent = ifAbsent;
      this.etag = etag;
      this.path = path;
    }

    @Override
    public void write(int b) throws IOException {
      out.write(b);
    }

    @Override
    public void write(byte[] b, int off, int len) throws IOException {
      out.write(b, off, len);
    }

    @Override
    public void flush() throws IOException {
      out.flush();
    }

    @Override
    public void close() throws IOException {
      if (closed) {
        return;
      }
      closed = true;
      try {
        out.close();
        if (ifAbsent) {
          try {
            Files.createLink(target.toPath(), tmp.toPath());
          } catch (java.nio.file.FileAlreadyExistsException e) {
            throw new FileAlreadyExistsException(path + " already exists (If-None-Match: *)");
          }
        } else {
          File sidecar = new File(target.getParentFile(), "." + target.getName() + ".cas");
          // a file lock excludes other processes; within this JVM a second one would throw, so threads queue here
          synchronized (CAS) {
            try (FileChannel ch = FileChannel.open(sidecar.toPath(), StandardOpenOption.CREATE,
                     StandardOpenOption.WRITE)) {
              FileLock lock = ch.lock();  // released with the channel
              String current;
              try {
                current = etagOf(Files.readAttributes(target.toPath(), BasicFileAttributes.class));
              } catch (java.nio.file.NoSuchFileException e) {
                current = "";
              }
              if (!current.equals(etag)) {
                throw new FileAlreadyExistsException(path + " changed: its ETag is not " + etag + " (If-Match)");
              }
              Files.move(tmp.toPath(), target.toPath(), StandardCopyOption.ATOMIC_MOVE,
                  StandardCopyOption.REPLACE_EXISTING);
              lock.release();
            }
          }
        }
      } finally {
        Files.deleteIfExists(tmp.toPath());
      }
    }
  }
}
